//! `cordon profile explain|diff`: a profile (built-in or TOML file, `extends` resolved) in plain
//! words, and what one allows that another does not. The words are the policy crate's
//! (`cordon_policy::explain`); this only loads the profiles and prints.

use clap::{Args, Subcommand};
use cordon_policy::explain::{explain, render, render_diff, Explained};
use cordon_policy::Profile;

/// `cordon profile --help`'s text.
pub const LONG_ABOUT: &str = "What a profile allows, in plain words: the files a sandbox may read, write and \
execute, the hosts it may reach, its limits. PROFILE is a built-in (default, strict) or a TOML \
file; a file's `extends` is resolved, so what is printed is everything the sandbox gets.\n\n\
Examples:\n  cordon profile explain strict\n  cordon profile explain ./job.toml\n  \
cordon profile diff default ./job.toml      # what job.toml allows beyond default, and the reverse\n\n\
A file that does not load (unknown key, bad value, missing file) is an error naming the key and \
line, with exit status 125, as `cordon run --profile` would refuse it.";

#[derive(Args, Debug)]
pub struct ProfileArgs {
    #[command(subcommand)]
    command: ProfileCommand,
}

#[derive(Subcommand, Debug)]
enum ProfileCommand {
    /// Print what PROFILE allows: read, write, execute, network, limits.
    #[command(
        long_about = "Print what PROFILE allows, section by section: what may be read, \
written, executed (`[exec] allow`, or any file), reached over the network (through the egress \
proxy), and the limits. Each line names one entry of the profile (a bind, an allowed program, \
a host), so nothing is summed up away. Values of `[env] set` are not shown, only their names.\n\n\
Examples:\n  cordon profile explain default\n  cordon profile explain ./job.toml"
    )]
    Explain {
        /// A built-in (default, strict) or a TOML profile file.
        #[arg(value_name = "PROFILE")]
        profile: String,
    },
    /// Print what B allows that A does not, and what A allows that B does not.
    #[command(
        long_about = "Compare two profiles: first everything B allows that A does not \
(files read, written or executed, hosts reached, higher limits), then the reverse. Use it \
to review a change before running with it: `cordon profile diff old.toml new.toml` shows \
exactly what the new one widens.\n\n\
Examples:\n  cordon profile diff strict default\n  cordon profile diff default ./job.toml"
    )]
    Diff {
        /// The profile compared against (built-in or file).
        #[arg(value_name = "A")]
        a: String,
        /// The profile whose extra permissions are listed first (built-in or file).
        #[arg(value_name = "B")]
        b: String,
    },
}

fn load(name: &str) -> Result<Explained, String> {
    let p = Profile::resolve(name).map_err(|e| e.to_string())?;
    let system = if p.image.is_some() {
        Vec::new()
    } else {
        cordon_linux::host_system_paths(p.system)
    };
    Ok(explain(&p, &system))
}

pub fn main(args: ProfileArgs) -> i32 {
    let text = match args.command {
        ProfileCommand::Explain { profile } => load(&profile).map(|e| render(&e)),
        ProfileCommand::Diff { a, b } => {
            load(&a).and_then(|ea| load(&b).map(|eb| render_diff(&ea, &eb)))
        }
    };
    match text {
        Ok(t) => {
            print!("{t}");
            0
        }
        Err(e) => crate::exit_code(Err::<(), _>(e)),
    }
}
