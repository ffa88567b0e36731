//! `cordon image build`: a Dockerfile and a context directory become an OCI image in the
//! store, one layer per RUN, COPY, ADD (and WORKDIR that creates a directory).
//!
//! Threat model: the Dockerfile, the context and everything a RUN step writes are hostile.
//! - The Dockerfile is read under a size cap and an instruction cap (see [`crate::dockerfile`]);
//!   instructions this builder does not implement are refused by name with their line.
//! - COPY and ADD read only from the context: a source that is absolute, has a `..`
//!   component, is a URL, or resolves (through a symlink) out of the context is refused; the
//!   context is opened once and every source resolved beneath it with
//!   `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`. Inside a copied directory nothing is
//!   followed: symlinks are copied as symlinks (their text means something only inside the
//!   image), FIFOs, sockets and devices are skipped. `.dockerignore` is honoured, and must
//!   itself be a regular file of the context (a symlink there is refused).
//! - RUN runs in a cordon sandbox (the [`StepRunner`] the caller gives: the engine), its root
//!   the layers so far under a writable layer that is a directory of the store; the build's
//!   network allowlist (none by default) and limits are the sandbox's. What the step wrote is
//!   read back without following anything, turned into a tar layer (overlayfs whiteouts into
//!   OCI `.wh.` entries) and unpacked into the store by the same hostile-layer unpacker as a
//!   pulled image: setuid bits, devices, `..` names, byte and entry caps all apply.
//! - Each layer-making step is cached by its inputs (the layers before it, the instruction,
//!   the environment, and for COPY the bytes copied): a changed file changes its COPY's
//!   layer and so everything after it.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use sha2::{Digest as _, Sha256};

use crate::digest::Digest;
use crate::dockerfile::{self, Instruction};
use crate::error::{ImageError, IoContext};
use crate::fsutil::{self, os};
use crate::oci::{
    ConfigFile, Descriptor, ImageConfig, Platform, OCI_CONFIG, OCI_LAYER, OCI_MANIFEST,
};
use crate::pull::PullOptions;
use crate::reference::Reference;
use crate::store::{ImageRecord, LayerRecord, Store, Writer};
use crate::unpack::{Budget, Limits};

/// Most layers an image may have (overlayfs' own limit).
pub(crate) const MAX_LAYERS: usize = 500;
/// Symlinks followed while resolving one destination inside the image.
const MAX_HOPS: usize = 40;

/// What [`build`] is asked to do.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// The Dockerfile's text.
    pub dockerfile: String,
    /// The context directory.
    pub context: PathBuf,
    /// Names for the result.
    pub names: Vec<Reference>,
    /// `--build-arg NAME=VALUE`.
    pub build_args: BTreeMap<String, String>,
    /// How a FROM image not in the store is pulled (registries, auth, platform).
    pub pull: PullOptions,
    /// Caps on each layer and on the image.
    pub limits: Limits,
    /// What the RUN steps' network allows (part of their cache key).
    pub allow_net: Vec<String>,
    /// Run every step again instead of taking cached layers.
    pub no_cache: bool,
    /// A `COPY --chown` to this uid is written as root's (0:0). For images that only ever
    /// run in cordon sandboxes (E2B templates): a sandbox has one user, uid 1000 inside, and
    /// it owns what the image's root owns, so root's files are that user's there, while a
    /// file owned by 1000 in the image would show as nobody. `None`: owners as Docker writes
    /// them.
    pub owner_as_root: Option<u32>,
}

/// One RUN step, as the engine is to run it.
#[derive(Debug, Clone)]
pub struct RunStep {
    /// The image's layers so far, top first (overlayfs' lowerdir order).
    pub layers: Vec<PathBuf>,
    /// The writable layer: a directory holding `upper/` and `work/`.
    pub upper: PathBuf,
    pub argv: Vec<String>,
    /// `KEY=VALUE`: the image's Env and the build's ARGs.
    pub env: Vec<String>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
}

/// Runs RUN steps: the caller's sandbox (cordon's engine). `Err` carries why the step failed
/// (its exit status, a limit it hit).
pub trait StepRunner {
    fn run(&self, step: &RunStep) -> Result<(), String>;
}

/// What a build made.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Built {
    pub names: Vec<String>,
    #[serde(flatten)]
    pub record: ImageRecord,
    /// Layer-making steps taken from the cache.
    pub cached_steps: usize,
    pub steps: usize,
}

/// The image as it grows.
struct State {
    layers: Vec<LayerRecord>,
    config: ImageConfig,
    platform: Platform,
    /// The cache chain: a digest of everything so far.
    chain: String,
    /// Whether `Cmd` came from the base image (an ENTRYPOINT then resets it, as in Docker).
    cmd_from_base: bool,
    /// Declared ARGs and their values.
    args: BTreeMap<String, String>,
}

fn sha(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    hex::encode(h.finalize())
}

fn step_err(i: &Instruction, why: impl std::fmt::Display) -> ImageError {
    ImageError::format(
        format!("Dockerfile line {} ({})", i.line, i.keyword),
        why.to_string(),
    )
}

/// Builds the image `opts` describes; `log` gets one line per step ("step 3/5: RUN …",
/// "cached") and notes.
pub fn build(
    store: &Store,
    opts: &BuildOptions,
    runner: &dyn StepRunner,
    log: &dyn Fn(&str),
) -> Result<Built, ImageError> {
    let instructions = dockerfile::parse(&opts.dockerfile)?;
    let ctx = Context::open(&opts.context)?;
    // Check the whole file before the first step runs: an unsupported instruction at line
    // 40 should not cost the 39 before it.
    let mut from_seen = false;
    for i in &instructions {
        match i.keyword.as_str() {
            "FROM" if from_seen => {
                return Err(step_err(i, "multi-stage builds (a second FROM) are not supported"))
            }
            "FROM" => from_seen = true,
            "ARG" => {}
            _ if !from_seen => return Err(step_err(i, "the first instruction must be FROM (or ARG)")),
            "RUN" | "COPY" | "ADD" | "ENV" | "WORKDIR" | "USER" | "LABEL" | "ENTRYPOINT"
            | "CMD" => {}
            other => {
                return Err(step_err(
                    i,
                    format!("{other} is not supported by `cordon image build` (FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, LABEL, ENTRYPOINT and CMD are)"),
                ))
            }
        }
    }
    if !from_seen {
        return Err(ImageError::format("the Dockerfile", "no FROM instruction"));
    }
    let w = store.writer()?;
    let total = instructions.len();
    let mut used_args = std::collections::BTreeSet::new();
    let mut global_args: BTreeMap<String, String> = BTreeMap::new();
    let mut state: Option<State> = None;
    let mut cached = 0;
    let mut steps = 0;
    for (n, ins) in instructions.iter().enumerate() {
        log(&format!("step {}/{}: {}", n + 1, total, ins.display()));
        let Some(st) = state.as_mut() else {
            match ins.keyword.as_str() {
                "ARG" => {
                    for (k, v) in
                        dockerfile::pairs(&ins.args, false).map_err(|e| step_err(ins, e))?
                    {
                        let v = opts.build_args.get(&k).cloned().or(v).unwrap_or_default();
                        used_args.insert(k.clone());
                        global_args.insert(k, v);
                    }
                }
                _ => {
                    let look = |k: &str| global_args.get(k).cloned();
                    let name =
                        dockerfile::expand(ins.args.trim(), &look).map_err(|e| step_err(ins, e))?;
                    state = Some(from(&w, store, opts, &name, ins, log)?);
                }
            }
            continue;
        };
        let vars = |st: &State| {
            let mut m = st.args.clone();
            for e in st.config.env.iter().flatten() {
                if let Some((k, v)) = e.split_once('=') {
                    m.insert(k.to_string(), v.to_string());
                }
            }
            m
        };
        let expand = |st: &State, s: &str| {
            let m = vars(st);
            dockerfile::expand(s, &|k| m.get(k).cloned()).map_err(|e| step_err(ins, e))
        };
        match ins.keyword.as_str() {
            "ARG" => {
                for (k, v) in dockerfile::pairs(&ins.args, false).map_err(|e| step_err(ins, e))? {
                    let v = opts
                        .build_args
                        .get(&k)
                        .cloned()
                        .or(v)
                        .or_else(|| global_args.get(&k).cloned())
                        .unwrap_or_default();
                    used_args.insert(k.clone());
                    st.args.insert(k, v);
                }
            }
            "ENV" => {
                let mut env = st.config.env.clone().unwrap_or_default();
                for (k, v) in dockerfile::pairs(&ins.args, true).map_err(|e| step_err(ins, e))? {
                    let Some(v) = v else {
                        return Err(step_err(ins, format!("{k} has no value (ENV KEY=VALUE)")));
                    };
                    let v = expand(st, &v)?;
                    env.retain(|e| e.split_once('=').map(|(n, _)| n) != Some(k.as_str()));
                    env.push(format!("{k}={v}"));
                }
                st.config.env = Some(env);
            }
            "LABEL" => {
                let mut labels = st.config.labels.clone().unwrap_or_default();
                for (k, v) in dockerfile::pairs(&ins.args, true).map_err(|e| step_err(ins, e))? {
                    labels.insert(expand(st, &k)?, expand(st, &v.unwrap_or_default())?);
                }
                st.config.labels = Some(labels);
            }
            "USER" => {
                let u = expand(st, ins.args.trim())?;
                if u.is_empty() {
                    return Err(step_err(ins, "USER needs a user"));
                }
                st.config.user = Some(u);
            }
            "ENTRYPOINT" | "CMD" => {
                let argv = match ins.json() {
                    Some(v) => v,
                    None if ins.args.trim_start().starts_with('[') => {
                        return Err(step_err(ins, "not a JSON array of strings"))
                    }
                    None => vec!["/bin/sh".into(), "-c".into(), ins.args.clone()],
                };
                if ins.keyword == "CMD" {
                    st.config.cmd = Some(argv);
                    st.cmd_from_base = false;
                } else {
                    st.config.entrypoint = Some(argv);
                    if st.cmd_from_base {
                        st.config.cmd = None;
                    }
                }
            }
            "WORKDIR" => {
                let dir = expand(st, ins.args.trim())?;
                if dir.is_empty() {
                    return Err(step_err(ins, "WORKDIR needs a directory"));
                }
                let abs = clean_abs(&match &st.config.working_dir {
                    Some(w) if !dir.starts_with('/') => format!("{w}/{dir}"),
                    _ => dir,
                });
                let dirs = layer_dirs(&w, st);
                let resolved = resolve_dir(&dirs, &abs).map_err(|e| step_err(ins, e))?;
                if resolved.iter().any(|d| d.missing) {
                    // Docker creates the directory: a layer of just its missing part.
                    let key = sha(&[&st.chain, "WORKDIR", &abs]);
                    steps += 1;
                    let (layer, hit) = layer_from_tar(&w, &opts.limits, Some(&key), |tb| {
                        for d in &resolved {
                            tb.dir(&d.path, d.mode, d.uid, d.gid, 0)?;
                        }
                        Ok(())
                    })?;
                    if hit {
                        cached += 1;
                        log("  cached");
                    }
                    push_layer(st, layer, &key, ins)?;
                }
                st.config.working_dir = Some(abs);
            }
            "COPY" | "ADD" => {
                let (layer, key, hit) = copy(&w, opts, &ctx, st, ins, &expand)?;
                steps += 1;
                if hit {
                    cached += 1;
                    log("  cached");
                }
                push_layer(st, layer, &key, ins)?;
            }
            "RUN" => {
                let argv = match ins.json() {
                    Some(v) if !v.is_empty() => v,
                    Some(_) => return Err(step_err(ins, "an empty command")),
                    None => vec!["/bin/sh".into(), "-c".into(), ins.args.clone()],
                };
                let mut env: Vec<String> =
                    st.args.iter().map(|(k, v)| format!("{k}={v}")).collect();
                env.extend(st.config.env.clone().unwrap_or_default());
                let argv_json = serde_json::to_string(&argv).unwrap_or_default();
                let key = sha(&[
                    &st.chain,
                    "RUN",
                    &argv_json,
                    &env.join("\0"),
                    st.config.working_dir.as_deref().unwrap_or(""),
                    st.config.user.as_deref().unwrap_or(""),
                    &opts.allow_net.join(","),
                ]);
                steps += 1;
                if let Some(layer) = cache_get(&w, &key, opts) {
                    cached += 1;
                    log("  cached");
                    push_layer(st, layer, &key, ins)?;
                    continue;
                }
                if st.layers.is_empty() {
                    return Err(step_err(
                        ins,
                        "RUN needs a root to run in: FROM scratch has none",
                    ));
                }
                let dir = store.tmp_path(&format!("build-{}", fsutil::unique()));
                let made = (|| {
                    for d in ["upper", "work"] {
                        fsutil::create_private_dir(&dir.join(d))
                            .ctx(|| format!("creating {}", dir.display()))?;
                    }
                    let step = RunStep {
                        layers: layer_dirs(&w, st),
                        upper: dir.clone(),
                        argv,
                        env,
                        working_dir: st.config.working_dir.clone(),
                        user: st.config.user.clone(),
                    };
                    runner.run(&step).map_err(|e| step_err(ins, e))?;
                    let upper = fsutil::open_dir(&dir.join("upper"))
                        .ctx(|| "opening the step's writable layer".into())?;
                    layer_from_tar(&w, &opts.limits, Some(&key), |tb| {
                        tb.tree(upper.as_fd(), "", true)
                    })
                })();
                remove_step_dir(&dir);
                let (layer, _) = made?;
                push_layer(st, layer, &key, ins)?;
            }
            other => return Err(step_err(ins, format!("{other} is not supported"))),
        }
        st.chain = sha(&[&st.chain, &ins.keyword, &ins.args]);
    }
    for k in opts.build_args.keys() {
        if !used_args.contains(k) {
            log(&format!(
                "note: --build-arg {k} is not declared by an ARG (unused)"
            ));
        }
    }
    let Some(st) = state else {
        return Err(ImageError::format("the Dockerfile", "no FROM instruction"));
    };
    let source = format!("build {}", opts.context.display());
    let record = assemble(
        &w,
        Assembly {
            layers: st.layers,
            config: st.config,
            platform: st.platform,
        },
        &opts.names,
        source,
        false,
    )?;
    Ok(Built {
        names: opts.names.iter().map(|n| n.to_string()).collect(),
        record,
        cached_steps: cached,
        steps,
    })
}

fn push_layer(
    st: &mut State,
    layer: LayerRecord,
    key: &str,
    ins: &Instruction,
) -> Result<(), ImageError> {
    if st.layers.len() >= MAX_LAYERS {
        return Err(step_err(
            ins,
            format!("more than {MAX_LAYERS} layers (overlayfs stacks at most {MAX_LAYERS})"),
        ));
    }
    st.chain = sha(&[key, &layer.diff_id.to_string()]);
    st.layers.push(layer);
    Ok(())
}

/// Layer directories of the image so far, top first.
fn layer_dirs(w: &Writer<'_>, st: &State) -> Vec<PathBuf> {
    st.layers
        .iter()
        .rev()
        .map(|l| w.store.layer_path(&l.diff_id))
        .collect()
}

fn cache_path(w: &Writer<'_>, key: &str) -> PathBuf {
    w.store.path().join("build-cache").join(key)
}

fn cache_get(w: &Writer<'_>, key: &str, opts: &BuildOptions) -> Option<LayerRecord> {
    if opts.no_cache {
        return None;
    }
    let bytes = crate::fsutil::read_small(&cache_path(w, key)).ok()?;
    let l: LayerRecord = serde_json::from_slice(&bytes).ok()?;
    w.existing_layer(&l.diff_id).map(|_| l)
}

fn cache_put(w: &Writer<'_>, key: &str, l: &LayerRecord) {
    let p = cache_path(w, key);
    if let Some(dir) = p.parent() {
        let _ = fsutil::create_private_dir(dir);
    }
    if let Ok(b) = serde_json::to_vec(l) {
        let _ = fsutil::write_atomic(&p, &b);
    }
}

/// Writes a layer with `fill`, stores it (unpacked by the hostile-layer unpacker) and caches
/// it under `key`. Says whether the store already had it.
pub(crate) fn layer_from_tar(
    w: &Writer<'_>,
    limits: &Limits,
    key: Option<&str>,
    fill: impl FnOnce(&mut TarBuilder) -> Result<(), ImageError>,
) -> Result<(LayerRecord, bool), ImageError> {
    let tmp = w
        .store
        .tmp_path(&format!("build-layer-{}.tar", fsutil::unique()));
    let file = fsutil::create_new_private(&tmp).ctx(|| format!("creating {}", tmp.display()))?;
    let result = (|| {
        let mut tb = TarBuilder::new(file, *limits);
        fill(&mut tb)?;
        let (digest, size) = tb.finish()?;
        let had = w.existing_layer(&digest).is_some();
        let desc = Descriptor {
            media_type: OCI_LAYER.to_string(),
            digest: digest.clone(),
            size,
            platform: None,
            annotations: None,
        };
        let budget = Budget::new(limits.max_bytes, 0);
        let mut fetch = |partial: &Path| {
            std::fs::rename(&tmp, partial).ctx(|| format!("storing {}", partial.display()))
        };
        w.ensure_layer(
            &desc,
            &digest,
            limits,
            &budget,
            &mut fetch,
            &crate::add::Quiet,
        )?;
        let layer = LayerRecord {
            blob: digest.clone(),
            diff_id: digest,
            size,
            media_type: OCI_LAYER.to_string(),
        };
        if let Some(key) = key {
            cache_put(w, key, &layer);
        }
        Ok((layer, had))
    })();
    let _ = std::fs::remove_file(&tmp);
    result
}

fn from(
    w: &Writer<'_>,
    store: &Store,
    opts: &BuildOptions,
    name: &str,
    ins: &Instruction,
    log: &dyn Fn(&str),
) -> Result<State, ImageError> {
    let name = match name.split_whitespace().collect::<Vec<_>>().as_slice() {
        [n] => n.to_string(),
        [n, as_, _] if as_.eq_ignore_ascii_case("as") => n.to_string(),
        _ => {
            if name.contains("--platform") {
                return Err(step_err(
                    ins,
                    "FROM --platform is not supported (use --platform of `cordon image build`)",
                ));
            }
            return Err(step_err(ins, "FROM IMAGE [AS NAME]"));
        }
    };
    let empty = || State {
        layers: Vec::new(),
        config: ImageConfig::default(),
        platform: opts.pull.platform.clone(),
        chain: sha(&["FROM", &name]),
        cmd_from_base: false,
        args: BTreeMap::new(),
    };
    if name == "scratch" {
        return Ok(empty());
    }
    if crate::store::names_directory(&name) {
        let path = opts.context.join(&name);
        let path = if Path::new(&name).is_absolute() {
            PathBuf::from(&name)
        } else {
            path
        };
        if path.join("oci-layout").is_file() {
            let imp = crate::import::import(
                store,
                &path,
                &crate::import::ImportOptions {
                    tag: None,
                    limits: opts.limits,
                    platform: opts.pull.platform.clone(),
                },
                &crate::add::Quiet,
            )?;
            let Some(first) = imp.into_iter().next() else {
                return Err(step_err(ins, format!("{} holds no image", path.display())));
            };
            return from_record(w, first.record, log);
        }
        // A plain directory is the image's one base layer.
        let dir = fsutil::open_dir(&path).ctx(|| format!("FROM {}", path.display()))?;
        let mut st = empty();
        let (layer, _) =
            layer_from_tar(w, &opts.limits, None, |tb| tb.tree(dir.as_fd(), "", false))?;
        st.chain = sha(&["FROM", &layer.diff_id.to_string()]);
        st.layers.push(layer);
        return Ok(st);
    }
    let record = match store.find(&name) {
        Ok(found) => found.record,
        Err(ImageError::NotFound { .. }) => {
            log(&format!("  pulling {name}"));
            crate::pull::pull(store, &name, &opts.pull, &crate::add::Quiet)?.record
        }
        Err(e) => return Err(e),
    };
    from_record(w, record, log)
}

fn from_record(
    w: &Writer<'_>,
    record: ImageRecord,
    _log: &dyn Fn(&str),
) -> Result<State, ImageError> {
    let config = ConfigFile::parse(&w.store.read_document(&record.config)?)?;
    for l in &record.layers {
        if w.existing_layer(&l.diff_id).is_none() {
            return Err(ImageError::format(
                format!("image {}", record.digest),
                format!(
                    "layer {} is missing from the store (pull or import the image again)",
                    l.diff_id
                ),
            ));
        }
    }
    let c = config.config.clone().unwrap_or_default();
    Ok(State {
        chain: sha(&["FROM", &record.digest.to_string()]),
        cmd_from_base: c.cmd.is_some(),
        layers: record.layers,
        config: c,
        platform: config.platform(),
        args: BTreeMap::new(),
    })
}

/// What [`assemble`] makes an image of.
pub(crate) struct Assembly {
    /// Bottom layer first.
    pub(crate) layers: Vec<LayerRecord>,
    pub(crate) config: ImageConfig,
    pub(crate) platform: Platform,
}

/// Writes the config and manifest and records the image under its names (`new_names`: each
/// must be a name the store does not have yet).
pub(crate) fn assemble(
    w: &Writer<'_>,
    st: Assembly,
    names: &[Reference],
    source: String,
    new_names: bool,
) -> Result<ImageRecord, ImageError> {
    let config = ConfigFile {
        architecture: st.platform.architecture.clone(),
        os: st.platform.os.clone(),
        variant: st.platform.variant.clone(),
        created: None,
        config: Some(st.config),
        rootfs: crate::oci::RootFs {
            kind: "layers".into(),
            diff_ids: st.layers.iter().map(|l| l.diff_id.clone()).collect(),
        },
    };
    let config_bytes = serde_json::to_vec(&config)
        .map_err(|e| ImageError::format("image config", e.to_string()))?;
    let config_digest = w.put_document(&config_bytes, None, "image config")?;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest.to_string(), "size": config_bytes.len()},
        "layers": st.layers.iter().map(|l| serde_json::json!({
            "mediaType": l.media_type, "digest": l.blob.to_string(), "size": l.size
        })).collect::<Vec<_>>(),
    });
    let manifest_bytes = serde_json::to_vec(&manifest)
        .map_err(|e| ImageError::format("image manifest", e.to_string()))?;
    let digest = w.put_document(&manifest_bytes, None, "image manifest")?;
    let mut unpacked = 0;
    let mut seen = std::collections::BTreeSet::new();
    for l in &st.layers {
        if seen.insert(l.diff_id.clone()) {
            unpacked += w.existing_layer(&l.diff_id).map(|r| r.bytes).unwrap_or(0);
        }
    }
    let record = ImageRecord {
        digest,
        index_digest: None,
        config: config_digest,
        platform: st.platform.to_string(),
        layers: st.layers,
        created: None,
        added: 0,
        source,
        unpacked_bytes: unpacked,
    };
    if new_names {
        w.record_new(record.clone(), names)?;
    } else {
        w.record(record.clone(), names)?;
    }
    Ok(record)
}

/// COPY / ADD: the context's files into a new layer.
fn copy(
    w: &Writer<'_>,
    opts: &BuildOptions,
    ctx: &Context,
    st: &State,
    ins: &Instruction,
    expand: &dyn Fn(&State, &str) -> Result<String, ImageError>,
) -> Result<(LayerRecord, String, bool), ImageError> {
    let (flags, rest) = copy_flags(&ins.args);
    let mut chown = None;
    let mut chmod = None;
    for flag in flags {
        let flag = dockerfile::words(flag)
            .map_err(|e| step_err(ins, e))?
            .concat();
        if let Some(v) = flag.strip_prefix("--chown=") {
            let v = expand(st, v)?;
            let owner = copy_owner(&layer_dirs(w, st), &v)
                .map_err(|e| step_err(ins, format!("--chown={v}: {e}")))?;
            chown = Some(match opts.owner_as_root {
                Some(u) if owner.0 == u64::from(u) => (0, 0),
                _ => owner,
            });
        } else if let Some(v) = flag.strip_prefix("--chmod=") {
            let v = expand(st, v)?;
            chmod = Some(
                u32::from_str_radix(&v, 8)
                    .ok()
                    .filter(|m| !v.is_empty() && v.len() <= 5 && *m <= 0o7777)
                    .ok_or_else(|| {
                        step_err(
                            ins,
                            format!("--chmod={v}: an octal mode (e.g. 0755) is supported"),
                        )
                    })?,
            );
        } else {
            let why = if flag.starts_with("--from") {
                "COPY --from (multi-stage builds) is not supported".to_string()
            } else {
                format!(
                    "the flag {} is not supported (--chown and --chmod are)",
                    flag.split('=').next().unwrap_or_default()
                )
            };
            return Err(step_err(ins, why));
        }
    }
    let rest_ins = Instruction {
        line: ins.line,
        keyword: ins.keyword.clone(),
        args: rest.to_string(),
    };
    let words = match rest_ins.json() {
        Some(v) => v,
        None => dockerfile::words(rest).map_err(|e| step_err(ins, e))?,
    };
    if let Some(flag) = words.iter().find(|w| w.starts_with("--")) {
        return Err(step_err(
            ins,
            format!("{flag}: flags come before the sources"),
        ));
    }
    let words = words
        .iter()
        .map(|w| expand(st, w))
        .collect::<Result<Vec<_>, _>>()?;
    let [srcs @ .., dest] = words.as_slice() else {
        return Err(step_err(ins, "COPY SRC... DEST"));
    };
    if srcs.is_empty() {
        return Err(step_err(ins, "COPY SRC... DEST"));
    }
    // Every source is checked before anything is copied.
    let mut sources = Vec::new();
    for s in srcs {
        if s.contains("://") || s.starts_with("git@") {
            return Err(step_err(ins, format!("{s}: builds never fetch from URLs; download it in a RUN step with --allow-net, or put it in the context")));
        }
        if s.starts_with('/') {
            return Err(step_err(ins, format!("{s}: an absolute path is not in the build context (sources are relative to it)")));
        }
        if Path::new(s)
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(step_err(
                ins,
                format!("{s}: `..` leaves the build context (refused)"),
            ));
        }
        if ins.keyword == "ADD" {
            let l = s.to_ascii_lowercase();
            if [
                ".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tar.zst",
            ]
            .iter()
            .any(|x| l.ends_with(x))
            {
                return Err(step_err(ins, format!("{s}: ADD does not unpack archives here; COPY it and unpack it in a RUN step")));
            }
        }
        let matched = ctx.glob(s).map_err(|e| step_err(ins, e))?;
        if matched.is_empty() {
            return Err(step_err(ins, format!("{s}: no such file in the build context (or every match is excluded by .dockerignore)")));
        }
        sources.extend(matched);
    }
    let into_dir = dest.ends_with('/')
        || sources.len() > 1
        || srcs.iter().any(|s| s.contains(['*', '?', '[']));
    let abs_dest = clean_abs(&match &st.config.working_dir {
        Some(wd) if !dest.starts_with('/') => format!("{wd}/{dest}"),
        _ if !dest.starts_with('/') => format!("/{dest}"),
        _ => dest.clone(),
    });
    let dirs = layer_dirs(w, st);
    let mut tar_digest = String::new();
    let (layer, hit) = layer_from_tar(w, &opts.limits, None, |tb| {
        for src in &sources {
            let st_src = rustix::fs::fstat(&src.fd).ctx(|| format!("stat {}", src.rel))?;
            let is_dir = FileType::from_raw_mode(st_src.st_mode) == FileType::Directory;
            // Where this source lands: a directory's contents go into DEST, a file to
            // DEST/name when DEST is (or must be) a directory, else to DEST itself.
            let dest_is_dir = is_dir
                || into_dir
                || resolve_dir(&dirs, &abs_dest)
                    .is_ok_and(|r| r.last().is_some_and(|d| !d.missing));
            let (parent, target) = if dest_is_dir && !is_dir {
                let name = Path::new(&src.rel)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (
                    abs_dest.clone(),
                    format!("{}/{}", abs_dest.trim_end_matches('/'), name),
                )
            } else if is_dir {
                (abs_dest.clone(), abs_dest.clone())
            } else {
                let p = Path::new(&abs_dest)
                    .parent()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "/".into());
                (p, abs_dest.clone())
            };
            let resolved = resolve_dir(&dirs, &parent).map_err(|e| step_err(ins, e))?;
            let real_parent = resolved.last().map(|d| d.path.clone()).unwrap_or_default();
            for d in &resolved {
                // Directories the COPY creates belong to --chown's owner, as in Docker.
                let (uid, gid) = match chown {
                    Some(o) if d.missing => o,
                    _ => (d.uid, d.gid),
                };
                tb.dir(&d.path, d.mode, uid, gid, 0)?;
            }
            tb.chown = chown;
            tb.chmod = chmod;
            if is_dir {
                tb.walk_context(ctx, src, &real_parent)?;
            } else {
                let name = Path::new(&target)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let path = if real_parent.is_empty() {
                    name
                } else {
                    format!("{real_parent}/{name}")
                };
                tb.file_fd(&src.fd, &path, &st_src)?;
            }
            tb.chown = None;
            tb.chmod = None;
        }
        tar_digest = tb.digest_so_far();
        Ok(())
    })?;
    let key = sha(&[
        &st.chain,
        &ins.keyword,
        &abs_dest,
        &layer.diff_id.to_string(),
        &tar_digest,
    ]);
    Ok((layer, key, hit))
}

/// The leading `--flag[=value]` words of a COPY or ADD, and the rest.
fn copy_flags(args: &str) -> (Vec<&str>, &str) {
    let mut flags = Vec::new();
    let mut rest = args.trim_start();
    while rest.starts_with("--") {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        flags.push(&rest[..end]);
        rest = rest[end..].trim_start();
    }
    (flags, rest)
}

/// `--chown`'s owner as BuildKit resolves it: names in the image's `/etc/passwd` and
/// `/etc/group` (a user name alone: its primary group), numbers as given (a uid alone: the
/// same number as the gid).
fn copy_owner(layers: &[PathBuf], spec: &str) -> Result<(u64, u64), String> {
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match spec.split_once(':') {
        None if numeric(spec) => {
            let uid = crate::user::resolve_user(layers, &format!("{spec}:0"))?.0;
            Ok((uid as u64, uid as u64))
        }
        _ => crate::user::resolve_user(layers, spec).map(|(u, g)| (u as u64, g as u64)),
    }
}

/// `/a/./b/../c` → `/a/c` (never above `/`).
fn clean_abs(p: &str) -> String {
    cordon_policy::lexical::resolve("", p)
}

/// One directory on the way to a destination inside the image.
#[derive(Debug, Clone)]
struct DirEntry {
    /// Relative to the image root, symlinks in the layers resolved (`usr/bin`, not `bin`).
    path: String,
    mode: u32,
    uid: u64,
    gid: u64,
    missing: bool,
}

/// What the image so far has at `rel`: the entry of the top-most layer that has it (a
/// whiteout hides it). Every layer is looked into beneath its own directory, through no
/// symlink: the layers are hostile trees too.
fn lookup(layers: &[PathBuf], rel: &str) -> Option<(rustix::fs::Stat, Option<String>)> {
    for layer in layers {
        let Ok(root) = fsutil::open_dir(layer) else {
            continue;
        };
        let fd = rustix::fs::openat2(
            &root,
            if rel.is_empty() { "." } else { rel },
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH
                | ResolveFlags::NO_SYMLINKS
                | ResolveFlags::NO_MAGICLINKS
                | ResolveFlags::NO_XDEV,
        );
        let Ok(fd) = fd else { continue };
        let Ok(st) = rustix::fs::fstat(&fd) else {
            continue;
        };
        let ft = FileType::from_raw_mode(st.st_mode);
        if ft == FileType::RegularFile && st.st_size == 0 {
            // A whiteout (stored as an empty file with the xattr): the entry is gone.
            let p = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
            let mut buf = [0u8; 8];
            if rustix::fs::lgetxattr(p.as_str(), "user.overlay.whiteout", &mut buf).is_ok() {
                return None;
            }
        }
        let target = if ft == FileType::Symlink {
            rustix::fs::readlinkat(&fd, "", Vec::new())
                .ok()
                .map(|t| t.to_string_lossy().into_owned())
        } else {
            None
        };
        return Some((st, target));
    }
    None
}

/// The directories from `/` down to `abs` as the image so far has them, symlinks resolved
/// inside the image's root (so that `COPY x /bin/` into a root where `/bin -> usr/bin` lands
/// in `usr/bin`, not over the link). Missing ones come out `missing`, mode 0755.
fn resolve_dir(layers: &[PathBuf], abs: &str) -> Result<Vec<DirEntry>, String> {
    let mut todo: std::collections::VecDeque<String> = abs
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_string)
        .collect();
    let mut done: Vec<DirEntry> = Vec::new();
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        if c == ".." {
            done.pop();
            continue;
        }
        let path = match done.last() {
            Some(d) => format!("{}/{c}", d.path),
            None => c.clone(),
        };
        let missing_above = done.last().is_some_and(|d| d.missing);
        let found = if missing_above {
            None
        } else {
            lookup(layers, &path)
        };
        match found {
            None => done.push(DirEntry {
                path,
                mode: 0o755,
                uid: 0,
                gid: 0,
                missing: true,
            }),
            Some((_, Some(target))) => {
                hops += 1;
                if hops > MAX_HOPS {
                    return Err(format!("{abs}: too many levels of symlinks in the image"));
                }
                if target.starts_with('/') {
                    done.clear();
                }
                for (i, t) in target
                    .split('/')
                    .filter(|t| !t.is_empty() && *t != ".")
                    .enumerate()
                {
                    todo.insert(i, t.to_string());
                }
            }
            Some((st, None)) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => done
                .push(DirEntry {
                    path,
                    mode: st.st_mode & 0o7777,
                    uid: st.st_uid as u64,
                    gid: st.st_gid as u64,
                    missing: false,
                }),
            Some(_) => return Err(format!("{abs}: /{path} is not a directory in the image")),
        }
    }
    Ok(done)
}

/// The build context: a directory opened once, and its `.dockerignore`.
struct Context {
    dir: OwnedFd,
    ignore: Vec<(bool, globset::GlobMatcher)>,
}

/// One COPY source, opened beneath the context.
struct Source {
    fd: OwnedFd,
    /// Its path relative to the context, as the Dockerfile named it (after globbing).
    rel: String,
}

impl Context {
    fn open(path: &Path) -> Result<Context, ImageError> {
        let dir = fsutil::open_dir(path).ctx(|| format!("the build context {}", path.display()))?;
        let mut ignore = Vec::new();
        match rustix::fs::openat2(
            &dir,
            ".dockerignore",
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
        ) {
            Ok(fd) => {
                let st = rustix::fs::fstat(&fd).ctx(|| ".dockerignore".into())?;
                if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                    return Err(ImageError::format(".dockerignore", "not a regular file"));
                }
                let mut text = String::new();
                File::from(fd)
                    .take(1 << 20)
                    .read_to_string(&mut text)
                    .ctx(|| "reading .dockerignore".into())?;
                for line in text.lines() {
                    let l = line.trim();
                    if l.is_empty() || l.starts_with('#') {
                        continue;
                    }
                    let (neg, pat) = match l.strip_prefix('!') {
                        Some(p) => (true, p.trim()),
                        None => (false, l),
                    };
                    let pat = clean_abs(pat);
                    let pat = pat.trim_start_matches('/');
                    if pat.is_empty() {
                        continue;
                    }
                    let g = globset::GlobBuilder::new(pat)
                        .literal_separator(true)
                        .build()
                        .map_err(|e| ImageError::format(".dockerignore", format!("{l:?}: {e}")))?;
                    ignore.push((neg, g.compile_matcher()));
                }
            }
            Err(rustix::io::Errno::NOENT) => {}
            Err(rustix::io::Errno::LOOP) => {
                return Err(ImageError::format(
                    ".dockerignore",
                    "a symlink (refused: it must be a file of the context itself)",
                ))
            }
            Err(e) => return Err(ImageError::io(".dockerignore", e.into())),
        }
        Ok(Context { dir, ignore })
    }

    /// Whether `.dockerignore` excludes `rel` (a pattern matching a directory above it
    /// excludes it too; the last matching line decides, `!` lines re-include).
    fn excluded(&self, rel: &str) -> bool {
        let mut out = false;
        for (neg, m) in &self.ignore {
            let mut p = Path::new(rel);
            let hit = loop {
                if m.is_match(p) {
                    break true;
                }
                match p.parent() {
                    Some(q) if !q.as_os_str().is_empty() => p = q,
                    _ => break false,
                }
            };
            if hit {
                out = !neg;
            }
        }
        out
    }

    fn open_beneath(&self, rel: &str) -> Result<OwnedFd, String> {
        rustix::fs::openat2(
            &self.dir,
            if rel.is_empty() { "." } else { rel },
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| match e {
            rustix::io::Errno::XDEV => {
                format!("{rel}: leaves the build context (a symlink pointing out of it; refused)")
            }
            rustix::io::Errno::NOENT => format!("{rel}: no such file in the build context"),
            e => format!("{rel}: {e}"),
        })
    }

    /// The sources `pattern` names: itself, or (a `*`/`?`/`[` in its last component) the
    /// matching entries of its directory; `.dockerignore`d ones left out.
    fn glob(&self, pattern: &str) -> Result<Vec<Source>, String> {
        let clean = clean_abs(pattern);
        let rel = clean.trim_start_matches('/').to_string();
        let (parent, last) = match rel.rsplit_once('/') {
            Some((p, l)) => (p.to_string(), l.to_string()),
            None => (String::new(), rel.clone()),
        };
        if parent.contains(['*', '?', '[']) {
            return Err(format!("{pattern}: wildcards only in the last component"));
        }
        if !last.contains(['*', '?', '[']) {
            if !rel.is_empty() && self.excluded(&rel) {
                return Err(format!("{pattern}: excluded by .dockerignore"));
            }
            let fd = self.open_beneath(&rel)?;
            return Ok(vec![Source { fd, rel }]);
        }
        let m = globset::GlobBuilder::new(&last)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("{pattern}: {e}"))?
            .compile_matcher();
        let dir = self.open_beneath(&parent)?;
        let mut names = Vec::new();
        for e in rustix::fs::Dir::read_from(&dir).map_err(|e| format!("{parent}: {e}"))? {
            let e = e.map_err(|e| format!("{parent}: {e}"))?;
            let n = e.file_name().to_string_lossy().into_owned();
            if n != "." && n != ".." && m.is_match(&n) {
                names.push(n);
            }
        }
        names.sort();
        let mut out = Vec::new();
        for n in names {
            let rel = if parent.is_empty() {
                n
            } else {
                format!("{parent}/{n}")
            };
            if self.excluded(&rel) {
                continue;
            }
            out.push(Source {
                fd: self.open_beneath(&rel)?,
                rel,
            });
        }
        Ok(out)
    }
}

/// A SHA-256 of what is written, and a count.
struct HashingWriter {
    inner: File,
    hasher: Sha256,
    count: u64,
}

impl Write for HashingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A layer tar being written, under the build's byte and entry caps.
pub(crate) struct TarBuilder {
    tar: tar::Builder<HashingWriter>,
    /// The tree is an unpacked layer of the store: its `user.overlay.*` whiteouts and opaque
    /// directories become OCI `.wh.` entries again, and as root its owners are kept.
    pub(crate) from_store: bool,
    limits: Limits,
    bytes: u64,
    entries: u64,
    dirs_written: std::collections::BTreeSet<String>,
    /// COPY --chown: every entry written gets this owner.
    chown: Option<(u64, u64)>,
    /// COPY --chmod: every file and directory written gets this mode.
    chmod: Option<u32>,
}

fn tar_err(e: io::Error) -> ImageError {
    ImageError::io("writing a layer", e)
}

impl TarBuilder {
    pub(crate) fn new(file: File, limits: Limits) -> TarBuilder {
        let mut tar = tar::Builder::new(HashingWriter {
            inner: file,
            hasher: Sha256::new(),
            count: 0,
        });
        tar.mode(tar::HeaderMode::Complete);
        TarBuilder {
            tar,
            from_store: false,
            limits,
            bytes: 0,
            entries: 0,
            dirs_written: Default::default(),
            chown: None,
            chmod: None,
        }
    }

    fn count(&mut self, bytes: u64) -> Result<(), ImageError> {
        self.entries += 1;
        self.bytes += bytes;
        if self.entries > self.limits.max_entries {
            return Err(ImageError::Limit(format!(
                "a layer with more than {} entries",
                self.limits.max_entries
            )));
        }
        if self.bytes > self.limits.max_bytes {
            return Err(ImageError::Limit(format!(
                "a layer of more than {} bytes",
                self.limits.max_bytes
            )));
        }
        Ok(())
    }

    fn header(
        kind: tar::EntryType,
        mode: u32,
        uid: u64,
        gid: u64,
        mtime: u64,
        size: u64,
    ) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode & 0o7777);
        h.set_uid(uid);
        h.set_gid(gid);
        h.set_mtime(mtime);
        h.set_size(size);
        h
    }

    fn dir(
        &mut self,
        path: &str,
        mode: u32,
        uid: u64,
        gid: u64,
        mtime: u64,
    ) -> Result<(), ImageError> {
        if path.is_empty() || !self.dirs_written.insert(path.to_string()) {
            return Ok(());
        }
        self.count(0)?;
        let mut h = Self::header(tar::EntryType::Directory, mode, uid, gid, mtime, 0);
        self.tar
            .append_data(&mut h, format!("{path}/"), io::empty())
            .map_err(tar_err)
    }

    fn whiteout(&mut self, prefix: &str, name: &str, mtime: u64) -> Result<(), ImageError> {
        self.count(0)?;
        let wh = if prefix.is_empty() {
            format!(".wh.{name}")
        } else {
            format!("{prefix}/.wh.{name}")
        };
        let mut h = Self::header(tar::EntryType::Regular, 0o644, 0, 0, mtime, 0);
        self.tar
            .append_data(&mut h, wh, io::empty())
            .map_err(tar_err)
    }

    /// Owners written: a store layer's as root (they are the image's), else 0 (the
    /// image's root: rootless, and what a sandbox wrote, everything is its user's).
    fn owner(&self, st: &rustix::fs::Stat) -> (u64, u64) {
        if let Some(o) = self.chown {
            return o;
        }
        if self.from_store && rustix::process::geteuid().is_root() {
            (st.st_uid as u64, st.st_gid as u64)
        } else {
            (0, 0)
        }
    }

    fn file_fd(
        &mut self,
        fd: &OwnedFd,
        path: &str,
        st: &rustix::fs::Stat,
    ) -> Result<(), ImageError> {
        let size = st.st_size as u64;
        self.count(size)?;
        let (uid, gid) = self.owner(st);
        let mut h = Self::header(
            tar::EntryType::Regular,
            self.chmod.unwrap_or(st.st_mode),
            uid,
            gid,
            st.st_mtime as u64,
            size,
        );
        let f = File::from(fd.try_clone().map_err(tar_err)?);
        // A file that shrinks while it is read is padded: the archive stays well formed.
        let r = f.take(size).chain(io::repeat(0)).take(size);
        self.tar.append_data(&mut h, path, r).map_err(tar_err)
    }

    /// Copies the tree under `dir` into the layer at `prefix` (relative to the image root),
    /// following nothing. `overlay`: the tree is an overlayfs upper directory (whiteouts
    /// become `.wh.` entries).
    pub(crate) fn tree(
        &mut self,
        dir: BorrowedFd<'_>,
        prefix: &str,
        overlay: bool,
    ) -> Result<(), ImageError> {
        self.walk(dir, prefix, overlay, None, "", 0)
    }

    fn walk_context(
        &mut self,
        ctx: &Context,
        src: &Source,
        prefix: &str,
    ) -> Result<(), ImageError> {
        self.walk(src.fd.as_fd(), prefix, false, Some(ctx), &src.rel, 0)
    }

    fn walk(
        &mut self,
        dir: BorrowedFd<'_>,
        prefix: &str,
        overlay: bool,
        ctx: Option<&Context>,
        ctx_rel: &str,
        depth: usize,
    ) -> Result<(), ImageError> {
        if depth > self.limits.max_depth {
            return Err(ImageError::Limit(format!(
                "a tree deeper than {} levels",
                self.limits.max_depth
            )));
        }
        if (overlay || self.from_store) && !prefix.is_empty() && opaque(dir) {
            self.count(0)?;
            let mut h = Self::header(tar::EntryType::Regular, 0o644, 0, 0, 0, 0);
            self.tar
                .append_data(&mut h, format!("{prefix}/.wh..wh..opq"), io::empty())
                .map_err(tar_err)?;
        }
        let mut names = Vec::new();
        for e in rustix::fs::Dir::read_from(dir)
            .map_err(|e| ImageError::io("reading a directory", e.into()))?
        {
            let e = e.map_err(|e| ImageError::io("reading a directory", e.into()))?;
            let n = e.file_name().to_bytes().to_vec();
            if n != b"." && n != b".." {
                names.push(n);
            }
        }
        names.sort();
        for name in names {
            let Ok(name_s) = String::from_utf8(name.clone()) else {
                continue;
            };
            let path = if prefix.is_empty() {
                name_s.clone()
            } else {
                format!("{prefix}/{name_s}")
            };
            let rel = if ctx_rel.is_empty() {
                name_s.clone()
            } else {
                format!("{ctx_rel}/{name_s}")
            };
            if ctx.is_some_and(|c| c.excluded(&rel)) {
                continue;
            }
            let Ok(st) = rustix::fs::statat(dir, os(&name), AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            if overlay && engine_made(&path, &st) {
                continue;
            }
            let mtime = st.st_mtime.max(0) as u64;
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    let child = fsutil::open_dir_beneath(dir, &name).map_err(|e| {
                        if e.kind() == io::ErrorKind::PermissionDenied {
                            // Rootless, a directory its owner (the sandbox's user, which is
                            // ours) made unreadable: said, not a fault of the server's.
                            ImageError::Unsupported(format!(
                                "/{path}: a directory cordon cannot read (its mode denies its                                  owner): make it readable (chmod u+rx) and try again"
                            ))
                        } else {
                            ImageError::io(path.clone(), e)
                        }
                    })?;
                    self.dirs_written.remove(&path);
                    let (uid, gid) = self.owner(&st);
                    self.dir(&path, self.chmod.unwrap_or(st.st_mode), uid, gid, mtime)?;
                    self.walk(child.as_fd(), &path, overlay, ctx, &rel, depth + 1)?;
                }
                FileType::RegularFile => {
                    let fd = match rustix::fs::openat(
                        dir,
                        os(&name),
                        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                        Mode::empty(),
                    ) {
                        Ok(fd) => fd,
                        Err(_) => continue,
                    };
                    let st = rustix::fs::fstat(&fd)
                        .map_err(|e| ImageError::io(path.clone(), e.into()))?;
                    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                        continue;
                    }
                    let mut buf = [0u8; 8];
                    if self.from_store
                        && st.st_size == 0
                        && rustix::fs::fgetxattr(&fd, "user.overlay.whiteout", &mut buf).is_ok()
                    {
                        self.whiteout(prefix, &name_s, mtime)?;
                        continue;
                    }
                    self.file_fd(&fd, &path, &st)?;
                }
                FileType::Symlink => {
                    let Ok(target) = rustix::fs::readlinkat(dir, os(&name), Vec::new()) else {
                        continue;
                    };
                    self.count(0)?;
                    let (uid, gid) = self.owner(&st);
                    let mut h = Self::header(tar::EntryType::Symlink, 0o777, uid, gid, mtime, 0);
                    self.tar
                        .append_link(&mut h, &path, Path::new(os(target.as_bytes())))
                        .map_err(tar_err)?;
                }
                FileType::CharacterDevice if overlay && st.st_rdev == 0 => {
                    // overlayfs' whiteout: the entry was deleted.
                    self.whiteout(prefix, &name_s, mtime)?;
                }
                FileType::Fifo => {
                    self.count(0)?;
                    let mut h = Self::header(tar::EntryType::Fifo, st.st_mode, 0, 0, mtime, 0);
                    self.tar
                        .append_data(&mut h, &path, io::empty())
                        .map_err(tar_err)?;
                }
                // Devices and sockets are never carried into an image.
                _ => {}
            }
        }
        Ok(())
    }

    fn digest_so_far(&self) -> String {
        self.tar
            .get_ref()
            .hasher
            .clone()
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    pub(crate) fn finish(self) -> Result<(Digest, u64), ImageError> {
        let mut w = self.tar.into_inner().map_err(tar_err)?;
        // Not fsynced: the tar is a scratch file, unpacked into the store and removed at once
        // (a crash leaves it in the store's tmp, which is never read back); syncing 200 MB of
        // a commit's layer here cost more than the rest of the commit.
        w.flush().map_err(tar_err)?;
        Ok((Digest::from_hasher(w.hasher), w.count))
    }
}

/// Removes a RUN step's directory. Rootless, overlayfs' own `work/work` (mode 000) and any
/// directory the step made unreadable are the user's: made listable first, never through a
/// symlink (each is looked at with `lstat`; the step's processes are gone by now).
fn remove_step_dir(dir: &Path) {
    if fsutil::remove_tree(dir).is_ok() {
        return;
    }
    fn open_up(p: &Path, depth: usize) {
        use std::os::unix::fs::PermissionsExt;
        if depth > fsutil::MAX_REMOVE_DEPTH {
            return;
        }
        if std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()) {
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700));
            for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
                open_up(&e.path(), depth + 1);
            }
        }
    }
    open_up(dir, 0);
    let _ = fsutil::remove_tree(dir);
}

/// What the engine itself put into a sandbox's writable layer to mount its own filesystems
/// on (`/proc`, `/dev`, the scratch tmpfs' mount points, the home and its link, the files it
/// binds over): never part of a RUN step's layer. A RUN's own writes below these paths land
/// in the tmpfs mounted there, not in the writable layer, so nothing of the step's is lost.
fn engine_made(path: &str, st: &rustix::fs::Stat) -> bool {
    let empty_file =
        FileType::from_raw_mode(st.st_mode) == FileType::RegularFile && st.st_size == 0;
    matches!(
        path,
        "proc" | "dev" | "tmp" | "workspace" | "home/sandbox" | "home/user" | "dev/shm"
    ) || (empty_file
        && matches!(
            path,
            "etc/hosts" | "etc/resolv.conf" | "etc/hostname" | "etc/passwd" | "etc/group"
        ))
}

/// Whether overlayfs marked this upper directory opaque (it replaced a lower one whole).
fn opaque(dir: BorrowedFd<'_>) -> bool {
    let mut buf = [0u8; 4];
    matches!(rustix::fs::fgetxattr(dir, "user.overlay.opaque", &mut buf), Ok(n) if n >= 1 && buf[0] == b'y')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_are_cleaned_never_above_the_root() {
        assert_eq!(clean_abs("/a/./b/../c"), "/a/c");
        assert_eq!(clean_abs("../../etc"), "/etc");
        assert_eq!(clean_abs("/"), "/");
    }
}
