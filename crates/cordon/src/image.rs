//! `cordon image …`: wiring for the image store (crates/cordon-image).

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use cordon_image::auth::{CredentialStore, Credentials};
use cordon_image::unpack::Limits;
use cordon_image::{Event, ImportOptions, Platform, Progress, PullOptions, Reference, Store};

const STORE_HELP: &str = "The store is <data-dir>/images: content-addressed blobs, each layer \
unpacked once into its own directory and shared by every image that has it, an index of names. \
Layers are hostile input: nothing in one can write outside its directory, device nodes are not \
created, setuid/setgid bits are stripped, and an image unpacks to at most --max-size bytes.";

#[derive(Args, Debug)]
#[command(
    about = "Manage OCI images: build, commit, pull, push, import, list, inspect, remove",
    long_about = "Manage the OCI images sandboxes can run from, without a daemon.\n\n".to_string() + STORE_HELP,
    after_help = "Examples:\n  cordon image pull python:3.12-slim\n  cordon image pull --insecure-registry 10.0.0.5:5000 10.0.0.5:5000/team/app:1\n  \
cordon image import ./app.tar                 # docker save / podman save, oci-archive\n  cordon image import ./oci-layout --tag app:dev\n  \
cordon image ls\n  cordon image inspect python:3.12-slim\n  cordon image rm python:3.12-slim && cordon image prune\n  \
echo \"$TOKEN\" | cordon image login ghcr.io -u me --password-stdin"
)]
pub struct ImageArgs {
    #[command(subcommand)]
    command: ImageCommand,
    #[command(flatten)]
    data: crate::serve::DataDir,
}

#[derive(Args, Debug, Clone)]
struct Output {
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug, Clone)]
struct Fetching {
    /// The platform to pick from multi-platform images (OS/ARCH[/VARIANT]).
    /// [default: this host's]
    #[arg(long)]
    platform: Option<String>,
    /// Most an image may unpack to (sum of its files' sizes; sparse files count in full).
    #[arg(long, default_value = "16G")]
    max_size: String,
}

impl Fetching {
    fn platform(&self) -> Result<Platform> {
        match &self.platform {
            Some(p) => Ok(Platform::parse(p)?),
            None => Ok(Platform::host()),
        }
    }
    fn limits(&self) -> Result<Limits> {
        let max = cordon_policy::units::parse_size(&self.max_size)
            .map_err(|e| anyhow!("--max-size: {e}"))?;
        Ok(Limits {
            max_bytes: max,
            ..Limits::default()
        })
    }
}

#[derive(Subcommand, Debug)]
enum ImageCommand {
    /// Build an image from a Dockerfile: each RUN in a cordon sandbox, COPY/ADD from the context only.
    #[command(
        after_help = "Instructions: FROM (an image in the store, a registry — pulled as `image pull` \
pulls, with its credentials —, scratch, or a directory / OCI layout), RUN, COPY, ADD (from the \
context only: never a URL, an absolute path, `..`, or a symlink out of the context), ENV, ARG, \
WORKDIR, USER, LABEL, ENTRYPOINT, CMD; anything else is refused with its line. Each RUN runs in a \
sandbox with the build's limits and no network unless --allow-net names hosts. Steps that make a \
layer are cached by their inputs (the layers before, the instruction, the environment, the \
bytes a COPY copies). Progress goes to stderr, one line per step.\n\nExample:\n  \
cordon image build -t my-agent:1 -f Dockerfile ."
    )]
    Build(crate::build::BuildArgs),
    /// Make an image of a running `cordon serve`'s sandbox: its image plus what it changed.
    #[command(
        after_help = "Talks to a running `cordon serve` over HTTP (--server, default http://127.0.0.1:8080; the key from --key or CORDON_API_KEY) and writes the image into that server's store (--data-dir of `cordon serve`; `cordon image ls --data-dir DIR` lists it there). The image is the sandbox's image's layers plus one layer of what the sandbox changed in its root (deletions as whiteouts), with the image's config (Env, Cmd, Entrypoint, WorkingDir, User) and --change lines on top; the sandbox is frozen while its layer is read. Not carried: /workspace, the home and /tmp (cordon mounts its own there in every sandbox: take a snapshot), volumes, memory and processes. A sandbox not made from an image is refused, and so is a name the store has already.

Examples:
  cordon image commit SANDBOX_ID my-agent:2
  cordon image commit SANDBOX_ID my-agent:3 --change 'ENV MODE=prod' --change 'CMD [\"python3\", \"app.py\"]'
  cordon image push my-agent:2 127.0.0.1:5000/team/my-agent:2 --data-dir SERVER_DATA_DIR"
    )]
    Commit {
        /// The sandbox's id.
        sandbox: String,
        /// The new image's name, NAME[:TAG].
        reference: String,
        /// A Dockerfile line applied to the image's config: ENV, CMD, ENTRYPOINT, WORKDIR,
        /// USER or LABEL. Repeatable.
        #[arg(long = "change", short = 'c', value_name = "INSTRUCTION")]
        changes: Vec<String>,
        #[command(flatten)]
        server: crate::client::ServerArgs,
        #[command(flatten)]
        out: Output,
    },
    /// Pull an image from a registry (Docker Hub, ghcr.io, any OCI registry).
    #[command(
        after_help = "REF is NAME[:TAG][@DIGEST] as Docker takes it: `python` is \
docker.io/library/python:latest. Credentials come from `cordon image login`, then \
~/.docker/config.json (and its credential helpers). Registries on loopback may speak plain \
HTTP; any other registry must speak HTTPS unless named with --insecure-registry. Every blob \
is checked against its sha256 before it is unpacked; an interrupted download resumes where \
it stopped (the next pull picks it up too). A layer the store already has is not fetched. \
Offline: `cordon image import` an archive or OCI layout, run from a directory with \
`cordon run --image ./DIR`, or pull from a registry on loopback."
    )]
    Pull {
        /// The image reference.
        reference: String,
        /// A registry (HOST:PORT) that may be reached over plain HTTP. Repeatable.
        #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
        insecure: Vec<String>,
        /// Report progress on stderr even when it is not a terminal: a line per layer done,
        /// and one every few seconds while bytes arrive. (On a terminal: a status line, always.)
        #[arg(long)]
        progress: bool,
        #[command(flatten)]
        fetching: Fetching,
        #[command(flatten)]
        out: Output,
    },
    /// Push an image of the store to an OCI registry (credentials as `image pull` finds them).
    #[command(
        after_help = "DEST is REGISTRY/NAME[:TAG], e.g. 127.0.0.1:5000/team/app:1. The store \
keeps layers unpacked, so each is written out again as a tar: the pushed image has the same \
files and config and a manifest digest of its own (printed). Registries on loopback may speak \
plain HTTP; others must speak HTTPS unless named with --insecure-registry."
    )]
    Push {
        /// A name or digest in the store.
        source: String,
        /// Where to push it.
        dest: String,
        /// A registry (HOST:PORT) that may be reached over plain HTTP. Repeatable.
        #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
        insecure: Vec<String>,
        #[command(flatten)]
        out: Output,
    },
    /// Import a `docker save` / `podman save` archive, an oci-archive or an OCI layout directory.
    #[command(
        after_help = "Names come from the archive (docker-archive RepoTags, OCI \
`org.opencontainers.image.ref.name` annotations; a bare tag becomes localhost/<file name>:<tag>); \
--tag adds one. An image without a name is reachable by its digest (`cordon image ls`)."
    )]
    Import {
        /// The archive file (plain, gzip or zstd) or layout directory.
        path: PathBuf,
        /// A name for the image, e.g. `app:dev`.
        #[arg(long)]
        tag: Option<String>,
        #[command(flatten)]
        fetching: Fetching,
        #[command(flatten)]
        out: Output,
    },
    /// List the images in the store.
    #[command(alias = "list")]
    Ls {
        #[command(flatten)]
        out: Output,
    },
    /// Show an image: names, digest, platform, layers (and what unpacking them skipped), config.
    Inspect {
        /// A name, a digest (`sha256:…`) or a unique digest prefix.
        reference: String,
        #[command(flatten)]
        out: Output,
    },
    /// Remove names (given a digest: the image and all its names); frees what nothing uses.
    #[command(alias = "rmi")]
    Rm {
        /// Names or digests.
        #[arg(required = true)]
        references: Vec<String>,
        #[command(flatten)]
        out: Output,
    },
    /// Remove images without a name, layers and blobs no image uses, and leftovers of
    /// interrupted pulls (layers a running sandbox uses stay).
    Prune {
        #[command(flatten)]
        out: Output,
    },
    /// Check credentials against a registry and store them for pulls (<data-dir>/images/auth.json, mode 0600).
    #[command(
        after_help = "The password is read from stdin with --password-stdin, or asked \
for on the terminal (not echoed). It is never printed or logged."
    )]
    Login {
        /// The registry (HOST[:PORT]). [default: docker.io]
        registry: Option<String>,
        #[arg(short, long)]
        username: String,
        /// Read the password (or token) from stdin.
        #[arg(long)]
        password_stdin: bool,
        /// A registry (HOST:PORT) that may be reached over plain HTTP. Repeatable.
        #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
        insecure: Vec<String>,
        #[command(flatten)]
        out: Output,
    },
    /// Forget the credentials `cordon image login` stored for a registry.
    Logout {
        /// The registry (HOST[:PORT]). [default: docker.io]
        registry: Option<String>,
    },
}

pub fn main(a: ImageArgs) -> i32 {
    if let ImageCommand::Commit {
        sandbox,
        reference,
        changes,
        server,
        out,
    } = a.command
    {
        return commit(&sandbox, &reference, changes, &server, out.json);
    }
    match run(a) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cordon: {e:#}");
            125
        }
    }
}

/// `cordon image commit`: a client of the server that runs the sandbox (the image lands in
/// that server's store). Exit 1 when the server refuses, as the other client commands.
fn commit(
    sandbox: &str,
    reference: &str,
    changes: Vec<String>,
    server: &crate::client::ServerArgs,
    json: bool,
) -> i32 {
    let body = serde_json::json!({ "reference": reference, "changes": changes });
    let path = format!("/v1/sandboxes/{}/commit", crate::client::enc(sandbox));
    let r = server
        .resolve()
        .and_then(|srv| srv.call("POST", &path, Some(body)));
    crate::client::finish(r, |v| {
        if json {
            crate::client::pretty(v);
            return;
        }
        println!(
            "committed {} {} ({} layers; new layer {} bytes; sandbox frozen {} ms)",
            familiar(v["reference"].as_str().unwrap_or(reference)),
            v["digest"].as_str().unwrap_or(""),
            v["layers"],
            v["layer_size"],
            v["frozen_ms"]
        );
    })
}

fn print_json(v: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn mb(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.1} GB", n as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MB", n as f64 / (1u64 << 20) as f64)
    }
}

fn familiar(name: &str) -> String {
    Reference::parse(name)
        .map(|r| r.familiar())
        .unwrap_or_else(|_| name.to_string())
}

fn run(a: ImageArgs) -> Result<()> {
    let data_dir = a.data.resolve();
    let open = || -> Result<Store> {
        Store::open(&data_dir)
            .with_context(|| format!("opening the image store in {}", data_dir.display()))
    };
    match a.command {
        ImageCommand::Build(b) => {
            cordon_linux::pin_name_service();
            crate::build::run(b, &open()?)?;
        }
        ImageCommand::Commit { .. } => {
            bail!("`cordon image commit` talks to a server: see `cordon image commit --help`")
        }
        ImageCommand::Push {
            source,
            dest,
            insecure,
            out,
        } => {
            cordon_linux::pin_name_service();
            let store = open()?;
            let opts = PullOptions {
                insecure,
                ..PullOptions::default()
            };
            let log = |l: &str| eprintln!("{l}");
            let pushed = cordon_image::push::push(&store, &source, &dest, &opts, &log)?;
            if out.json {
                return print_json(&pushed);
            }
            println!(
                "pushed {} {} ({} layers, {} blobs already there)",
                familiar(&pushed.reference),
                pushed.digest,
                pushed.layers,
                pushed.skipped_blobs
            );
        }
        ImageCommand::Pull {
            reference,
            insecure,
            progress,
            fetching,
            out,
        } => {
            // A statically linked cordon resolves names with glibc's own sources only.
            cordon_linux::pin_name_service();
            let store = open()?;
            let opts = PullOptions {
                insecure,
                platform: fetching.platform()?,
                limits: fetching.limits()?,
                ..PullOptions::default()
            };
            let bar = Bar::new(&reference, progress);
            let pulled = cordon_image::pull(&store, &reference, &opts, &bar);
            bar.finish();
            let pulled = pulled?;
            if out.json {
                return print_json(&pulled);
            }
            println!(
                "pulled {} {} ({}, {} layers, {} unpacked)",
                familiar(&pulled.reference),
                pulled.record.digest,
                pulled.record.platform,
                pulled.record.layers.len(),
                mb(pulled.record.unpacked_bytes)
            );
        }
        ImageCommand::Import {
            path,
            tag,
            fetching,
            out,
        } => {
            let store = open()?;
            let opts = ImportOptions {
                tag: tag.as_deref().map(Reference::parse).transpose()?,
                limits: fetching.limits()?,
                platform: fetching.platform()?,
            };
            let bar = Bar::new(&path.display().to_string(), false);
            let imported = cordon_image::import(&store, &path, &opts, &bar);
            bar.finish();
            let imported = imported?;
            if out.json {
                return print_json(&imported);
            }
            for i in imported {
                let names: Vec<String> = i.names.iter().map(|n| familiar(n)).collect();
                println!(
                    "imported {} {} ({}, {} layers, {} unpacked)",
                    if names.is_empty() {
                        "<no name>".into()
                    } else {
                        names.join(", ")
                    },
                    i.record.digest,
                    i.record.platform,
                    i.record.layers.len(),
                    mb(i.record.unpacked_bytes)
                );
            }
        }
        ImageCommand::Ls { out } => {
            let list = open()?.list()?;
            if out.json {
                return print_json(&list);
            }
            println!(
                "{:<50} {:<14} {:<14} {:>10}",
                "NAME", "DIGEST", "PLATFORM", "SIZE"
            );
            for i in list {
                let names = if i.names.is_empty() {
                    vec!["<none>".to_string()]
                } else {
                    i.names.iter().map(|n| familiar(n)).collect()
                };
                for n in names {
                    println!(
                        "{:<50} {:<14} {:<14} {:>10}",
                        n,
                        i.record.digest.short(),
                        i.record.platform,
                        mb(i.record.unpacked_bytes)
                    );
                }
            }
        }
        ImageCommand::Inspect { reference, out } => {
            let i = open()?.inspect(&reference)?;
            if out.json {
                return print_json(&i);
            }
            let names: Vec<String> = i.names.iter().map(|n| familiar(n)).collect();
            println!(
                "names:     {}",
                if names.is_empty() {
                    "<none>".into()
                } else {
                    names.join(", ")
                }
            );
            println!("digest:    {}", i.record.digest);
            if let Some(d) = &i.record.index_digest {
                println!("index:     {d}");
            }
            println!("platform:  {}", i.record.platform);
            if let Some(c) = &i.record.created {
                println!("created:   {c}");
            }
            println!("source:    {}", i.record.source);
            println!("unpacked:  {}", mb(i.record.unpacked_bytes));
            let c = i.config.config.clone().unwrap_or_default();
            println!("entrypoint: {:?}", c.entrypoint.unwrap_or_default());
            println!("cmd:        {:?}", c.cmd.unwrap_or_default());
            println!("workdir:    {}", c.working_dir.unwrap_or_default());
            println!("user:       {}", c.user.unwrap_or_default());
            println!("env:");
            for e in c.env.unwrap_or_default() {
                println!("  {e}");
            }
            println!("layers (bottom first):");
            for (l, r) in i.record.layers.iter().zip(&i.layer_reports) {
                let mut notes = Vec::new();
                if r.skipped_count > 0 {
                    notes.push(format!("{} entries skipped", r.skipped_count));
                }
                if r.setid_stripped > 0 {
                    notes.push(format!("{} setuid/setgid bits stripped", r.setid_stripped));
                }
                println!(
                    "  {} {:>10} {}",
                    l.diff_id.short(),
                    mb(r.bytes),
                    notes.join(", ")
                );
                for s in &r.skipped {
                    println!("      skipped {}: {}", s.path, s.reason);
                }
            }
        }
        ImageCommand::Rm { references, out } => {
            let store = open()?;
            let mut all = Vec::new();
            for r in &references {
                let removed = store.remove(r)?;
                if !out.json {
                    for u in &removed.untagged {
                        println!("untagged {}", familiar(u));
                    }
                    for d in &removed.deleted {
                        println!("deleted {d}");
                    }
                    match &removed.collected {
                        Some(p) if p.bytes > 0 => println!("freed {}", mb(p.bytes)),
                        Some(_) => {}
                        None => println!("another cordon is using the store: `cordon image prune` frees the space later"),
                    }
                }
                all.push(removed);
            }
            if out.json {
                return print_json(&all);
            }
        }
        ImageCommand::Prune { out } => {
            let p = open()?.prune()?;
            if out.json {
                return print_json(&p);
            }
            println!(
                "removed {} unnamed images, {} layers, {} blobs; freed {}{}",
                p.images.len(),
                p.layers,
                p.blobs,
                mb(p.bytes),
                if p.layers_in_use > 0 {
                    format!(
                        " ({} unused layers kept: a running sandbox holds them)",
                        p.layers_in_use
                    )
                } else {
                    String::new()
                }
            );
        }
        ImageCommand::Login {
            registry,
            username,
            password_stdin,
            insecure,
            out,
        } => {
            cordon_linux::pin_name_service();
            let registry = registry.unwrap_or_else(|| cordon_image::reference::DOCKER_HUB.into());
            let password = read_password(password_stdin)?;
            let creds = Credentials { username, password };
            let opts = PullOptions {
                insecure,
                ..PullOptions::default()
            };
            let host = cordon_image::login(&registry, &creds, &opts)?;
            let store = open()?;
            let cs = CredentialStore::new(store.path());
            cs.store(&host, &creds)?;
            if out.json {
                return print_json(&serde_json::json!({"registry": host, "stored": cs.own}));
            }
            println!(
                "login succeeded for {host} (stored in {})",
                cs.own.display()
            );
        }
        ImageCommand::Logout { registry } => {
            let registry = registry.unwrap_or_else(|| cordon_image::reference::DOCKER_HUB.into());
            let store = open()?;
            if CredentialStore::new(store.path()).remove(&registry)? {
                println!("removed the credentials for {registry}");
            } else {
                println!("no credentials stored for {registry}");
            }
        }
    }
    Ok(())
}

fn read_password(from_stdin: bool) -> Result<String> {
    let stdin = std::io::stdin();
    if !from_stdin && !stdin.is_terminal() {
        bail!("no terminal to ask for the password on: pass it with --password-stdin");
    }
    let mut line = String::new();
    if from_stdin {
        stdin.lock().read_line(&mut line)?;
    } else {
        eprint!("password: ");
        let _ = std::io::stderr().flush();
        let _echo = NoEcho::new();
        stdin.lock().read_line(&mut line)?;
        eprintln!();
    }
    let p = line.trim_end_matches(['\n', '\r']).to_string();
    if p.is_empty() {
        bail!("empty password");
    }
    Ok(p)
}

/// Turns terminal echo off on stdin while it lives.
struct NoEcho {
    saved: Option<rustix::termios::Termios>,
}

impl NoEcho {
    fn new() -> NoEcho {
        let stdin = std::io::stdin();
        let Ok(saved) = rustix::termios::tcgetattr(&stdin) else {
            return NoEcho { saved: None };
        };
        let mut quiet = saved.clone();
        quiet.local_modes.remove(rustix::termios::LocalModes::ECHO);
        let _ = rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &quiet);
        NoEcho { saved: Some(saved) }
    }
}

impl Drop for NoEcho {
    fn drop(&mut self) {
        if let Some(t) = &self.saved {
            let _ = rustix::termios::tcsetattr(
                std::io::stdin(),
                rustix::termios::OptionalActions::Now,
                t,
            );
        }
    }
}

/// One status line on stderr when it is a terminal: layers done, bytes fetched. Asked for
/// (`--progress`) where stderr is no terminal (an agent, a CI log): the same as lines.
struct Bar {
    what: String,
    tty: bool,
    lines: bool,
    state: Mutex<BarState>,
}

struct BarState {
    layers: usize,
    done: usize,
    total: u64,
    got: u64,
    drawn: Option<Instant>,
    note: String,
}

impl Bar {
    fn new(what: &str, asked: bool) -> Bar {
        let tty = std::io::stderr().is_terminal();
        Bar {
            what: what.to_string(),
            tty,
            lines: asked && !tty,
            state: Mutex::new(BarState {
                layers: 0,
                done: 0,
                total: 0,
                got: 0,
                drawn: None,
                note: String::new(),
            }),
        }
    }

    fn draw(&self, s: &mut BarState, force: bool) {
        if self.lines {
            if force
                || s.drawn
                    .is_none_or(|t| t.elapsed() >= Duration::from_secs(3))
            {
                s.drawn = Some(Instant::now());
                eprintln!(
                    "cordon: {}: {}/{} layers, {} of {}{}",
                    self.what,
                    s.done,
                    s.layers,
                    mb(s.got),
                    mb(s.total),
                    s.note
                );
            }
            return;
        }
        if !self.tty {
            return;
        }
        if !force
            && s.drawn
                .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
        {
            return;
        }
        s.drawn = Some(Instant::now());
        eprint!(
            "\r\x1b[K{}: {}/{} layers, {} of {}{}",
            self.what,
            s.done,
            s.layers,
            mb(s.got),
            mb(s.total),
            s.note
        );
    }

    fn finish(&self) {
        if self.tty && self.state.lock().is_ok_and(|s| s.drawn.is_some()) {
            eprint!("\r\x1b[K");
        }
    }
}

impl Progress for Bar {
    fn event(&self, e: Event<'_>) {
        let Ok(mut s) = self.state.lock() else { return };
        let mut force = false;
        match e {
            Event::Resolved { layers, .. } => {
                s.layers += layers;
                force = true;
            }
            Event::LayerCached { .. } => s.done += 1,
            Event::LayerStart { size, from, .. } => {
                s.total += size;
                s.got += from;
                if from > 0 {
                    s.note = format!(" (resumed at {})", mb(from));
                    if !self.tty && !self.lines {
                        eprintln!("cordon: resuming an interrupted download at byte {from}");
                    }
                }
            }
            Event::LayerBytes { n, .. } => s.got += n,
            Event::LayerUnpacking { .. } => {}
            Event::LayerDone { .. } => {
                s.done += 1;
                force = true;
            }
            Event::Retry { from, error, .. } => {
                s.note = format!(" (interrupted: {error}; resuming at {})", mb(from));
                force = true;
                if !self.tty && !self.lines {
                    eprintln!("cordon: download interrupted ({error}); resuming at byte {from}");
                }
            }
        }
        self.draw(&mut s, force);
    }
}
