//! `cordon e2b env`: the environment that points the published E2B SDKs at a `cordon serve`,
//! as shell `export` lines. Prints only what it is given (the key comes from `--key` or
//! `CORDON_API_KEY`, never from the server's data), and quotes every value for the shell.

use clap::{Args, Subcommand};

#[derive(Args, Debug)]
pub struct E2bArgs {
    #[command(subcommand)]
    command: E2bCommand,
}

#[derive(Subcommand, Debug)]
enum E2bCommand {
    /// Print the environment variables the E2B SDKs read, as `export` lines for a shell:
    /// `eval "$(cordon e2b env --key "$KEY")"`.
    Env(EnvArgs),
}

#[derive(Args, Debug)]
struct EnvArgs {
    /// The server's URL (`cordon serve`'s own address by default).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// A cordon API key (`cordon serve` prints one at first start; `cordon keys create`
    /// makes more). Without it, `$CORDON_API_KEY`; without that, E2B_API_KEY is left out.
    #[arg(long, value_name = "KEY")]
    key: Option<String>,
}

pub fn main(args: E2bArgs) -> i32 {
    match args.command {
        E2bCommand::Env(a) => {
            let key = a
                .key
                .or_else(|| std::env::var("CORDON_API_KEY").ok())
                .filter(|k| !k.is_empty());
            print!("{}", env_lines(&a.url, key.as_deref()));
            0
        }
    }
}

/// The lines: both URLs at the server (the SDKs' control plane and every sandbox's envd and
/// interpreter go through it), the key with the SDKs' key-format check off (a cordon key is
/// `cdn_…`, which SDKs from 2.30 on refuse unless told not to check), the volume API there
/// too (so nothing the SDK does leaves for E2B's cloud), and the debug switch off (with it on
/// the SDKs skip the server and look for envd on localhost:49983).
fn env_lines(url: &str, key: Option<&str>) -> String {
    let url = url.trim_end_matches('/');
    let mut out = String::new();
    for name in ["E2B_API_URL", "E2B_SANDBOX_URL", "E2B_VOLUME_API_URL"] {
        out.push_str(&format!("export {name}={}\n", quote(url)));
    }
    match key {
        Some(k) => out.push_str(&format!("export E2B_API_KEY={}\n", quote(k))),
        None => out.push_str(
            "# E2B_API_KEY: pass --key (or set CORDON_API_KEY) with a key of this server\n",
        ),
    }
    out.push_str("export E2B_VALIDATE_API_KEY=false\n");
    out.push_str("unset E2B_DEBUG E2B_DOMAIN\n");
    out
}

/// A value as one shell word: single-quoted unless it is plainly safe.
fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_every_variable_the_sdks_read() {
        let out = env_lines("http://127.0.0.1:8080/", Some("cdn_abc"));
        assert_eq!(
            out,
            "export E2B_API_URL=http://127.0.0.1:8080\n\
             export E2B_SANDBOX_URL=http://127.0.0.1:8080\n\
             export E2B_VOLUME_API_URL=http://127.0.0.1:8080\n\
             export E2B_API_KEY=cdn_abc\n\
             export E2B_VALIDATE_API_KEY=false\n\
             unset E2B_DEBUG E2B_DOMAIN\n"
        );
        let no_key = env_lines("http://h:1", None);
        assert!(!no_key.contains("export E2B_API_KEY"));
        assert!(no_key.contains("# E2B_API_KEY"));
    }

    #[test]
    fn hostile_values_stay_one_shell_word() {
        assert_eq!(quote("a'b; rm -rf /"), "'a'\\''b; rm -rf /'");
        assert_eq!(quote("$(id)"), "'$(id)'");
        assert_eq!(quote(""), "''");
    }
}
