//! `cordon image build`: wiring of cordon-image's builder to the engine. Each RUN step is a
//! `cordon run` of its own: the image's layers so far as the root, the step's writable layer
//! a directory of the store (so that it outlives the run), the build's network allowlist
//! (none unless `--allow-net`) and limits. The host's network, files and credentials never
//! reach a step: it is confined exactly as any sandbox is.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use clap::Args;
use cordon_image::build::{BuildOptions, RunStep, StepRunner};
use cordon_image::{PullOptions, Reference, Store};
use cordon_policy::units::{parse_duration, parse_size};
use cordon_policy::{Profile, RootImage};
use cordon_service::runner::{self, Job, Stdin};

#[derive(Args, Debug)]
pub struct BuildArgs {
    /// The context directory: what COPY and ADD may read (nothing outside it).
    pub context: PathBuf,
    /// The name (and tag) of the result, e.g. `my-agent:1`. Repeatable.
    #[arg(short = 't', long = "tag", required = true)]
    pub tags: Vec<String>,
    /// The Dockerfile. [default: CONTEXT/Dockerfile]
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// A value for an ARG (NAME=VALUE). Repeatable.
    #[arg(long = "build-arg", value_name = "NAME=VALUE")]
    pub build_args: Vec<String>,
    /// A host RUN steps may reach (as `cordon run --allow-net`). Repeatable. Default: none.
    #[arg(long = "allow-net", value_name = "HOST")]
    pub allow_net: Vec<String>,
    /// Memory of each RUN step.
    #[arg(long, default_value = "2G")]
    pub memory: String,
    /// CPU cores of each RUN step.
    #[arg(long)]
    pub cpus: Option<f64>,
    /// Wall-clock time of each RUN step.
    #[arg(long, default_value = "30m")]
    pub timeout: String,
    /// What each RUN step may write (its new layer), watched from outside.
    #[arg(long, default_value = "8G")]
    pub disk: String,
    /// Run every step again instead of taking cached layers.
    #[arg(long)]
    pub no_cache: bool,
    /// A registry (HOST:PORT) a FROM image may be pulled from over plain HTTP. Repeatable.
    #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
    pub insecure: Vec<String>,
    /// Most the image may unpack to.
    #[arg(long, default_value = "16G")]
    pub max_size: String,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Runs RUN steps in cordon sandboxes.
struct Engine {
    profile: Profile,
}

impl StepRunner for Engine {
    fn run(&self, step: &RunStep) -> Result<(), String> {
        let abs = |p: &std::path::Path| std::path::absolute(p).map_err(|e| e.to_string());
        let layers = step
            .layers
            .iter()
            .map(|l| abs(l))
            .collect::<Result<Vec<_>, _>>()?;
        let mut profile = self.profile.clone();
        profile.image = Some("cordon-image-build".into());
        profile.root_image = Some(RootImage {
            reference: "cordon-image-build".into(),
            digest: None,
            layers,
            env: step.env.clone(),
            entrypoint: Vec::new(),
            cmd: Vec::new(),
            working_dir: step.working_dir.clone(),
            user: step.user.clone(),
            run_as: None,
            upper: Some(abs(&step.upper)?),
            read_only: false,
        });
        profile.validate().map_err(|e| e.to_string())?;
        let outcome = runner::execute(Job {
            profile,
            argv: step.argv.clone(),
            cwd: None,
            env: BTreeMap::new(),
            stdin: Stdin::Empty,
            stream: true,
            module: None,
        })
        .map_err(|e| e.to_string())?;
        if !outcome.limits_hit.is_empty() {
            return Err(format!(
                "the step hit its limits: {} (see --memory, --timeout, --disk)",
                outcome
                    .limits_hit
                    .iter()
                    .map(|l| format!("{l:?}").to_lowercase())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        match outcome.exit_code {
            Some(0) => Ok(()),
            code => Err(format!(
                "the command failed (exit {}){}",
                code.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
                outcome.error.map(|e| format!(": {e}")).unwrap_or_default()
            )),
        }
    }
}

pub fn run(a: BuildArgs, store: &Store) -> Result<()> {
    let file = a
        .file
        .clone()
        .unwrap_or_else(|| a.context.join("Dockerfile"));
    let dockerfile = {
        use std::io::Read;
        let f = std::fs::File::open(&file).with_context(|| format!("-f {}", file.display()))?;
        let mut bytes = Vec::new();
        f.take(cordon_image::dockerfile::MAX_DOCKERFILE + 1)
            .read_to_end(&mut bytes)
            .with_context(|| format!("reading {}", file.display()))?;
        if bytes.len() as u64 > cordon_image::dockerfile::MAX_DOCKERFILE {
            return Err(anyhow!(
                "{}: larger than {} bytes (refused unread)",
                file.display(),
                cordon_image::dockerfile::MAX_DOCKERFILE
            ));
        }
        String::from_utf8(bytes).map_err(|_| anyhow!("{}: not UTF-8 text", file.display()))?
    };
    let mut build_args = BTreeMap::new();
    for b in &a.build_args {
        let (k, v) = b
            .split_once('=')
            .ok_or_else(|| anyhow!("--build-arg {b}: NAME=VALUE"))?;
        build_args.insert(k.to_string(), v.to_string());
    }
    let names = a
        .tags
        .iter()
        .map(|t| Reference::parse(t).map_err(|e| anyhow!("-t {t}: {e}")))
        .collect::<Result<Vec<_>>>()?;
    let max = parse_size(&a.max_size).map_err(|e| anyhow!("--max-size: {e}"))?;
    let limits = cordon_image::unpack::Limits {
        max_bytes: max,
        ..Default::default()
    };
    let mut profile = Profile::resolve("default").map_err(|e| anyhow!("{e}"))?;
    profile.limits.memory = parse_size(&a.memory).map_err(|e| anyhow!("--memory: {e}"))?;
    profile.limits.timeout = parse_duration(&a.timeout).map_err(|e| anyhow!("--timeout: {e}"))?;
    profile.limits.disk = parse_size(&a.disk).map_err(|e| anyhow!("--disk: {e}"))?;
    if let Some(c) = a.cpus {
        profile.limits.cpus = c;
    }
    profile.network.allow = a.allow_net.clone();
    let context = a
        .context
        .canonicalize()
        .with_context(|| format!("the build context {}", a.context.display()))?;
    let opts = BuildOptions {
        dockerfile,
        context,
        names,
        build_args,
        pull: PullOptions {
            insecure: a.insecure.clone(),
            limits,
            ..PullOptions::default()
        },
        limits,
        allow_net: a.allow_net.clone(),
        no_cache: a.no_cache,
        owner_as_root: None,
    };
    let engine = Engine { profile };
    let log = |l: &str| eprintln!("{l}");
    let built = cordon_image::build::build(store, &opts, &engine, &log)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&built)?);
        return Ok(());
    }
    println!(
        "built {} {} ({} layers; {} of {} steps cached)",
        built
            .names
            .iter()
            .map(|n| Reference::parse(n)
                .map(|r| r.familiar())
                .unwrap_or(n.clone()))
            .collect::<Vec<_>>()
            .join(", "),
        built.record.digest,
        built.record.layers.len(),
        built.cached_steps,
        built.steps
    );
    Ok(())
}
