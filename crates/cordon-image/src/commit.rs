//! `cordon image commit`: what a sandbox changed in its image's root becomes a new image in
//! the store — the image's layers, unchanged, plus one layer made of the sandbox's writable
//! (overlayfs upper) layer, with the image's config (`Env`, `Cmd`, `Entrypoint`,
//! `WorkingDir`, `User`, labels) carried over and, optionally, Dockerfile-style changes on
//! top (`ENV`, `CMD`, `ENTRYPOINT`, `WORKDIR`, `USER`, `LABEL`).
//!
//! Threat model: the writable layer was written by hostile code while it ran (it may still be
//! frozen mid-write). It is read exactly as a build's RUN step's layer is
//! ([`crate::build`]'s `TarBuilder`): from a directory fd the engine hands over, every entry
//! looked at with `AT_SYMLINK_NOFOLLOW`, directories opened beneath their parent with no
//! symlink followed, regular files re-checked on the open fd; symlinks are carried as their
//! text (never resolved), devices and sockets dropped, overlayfs whiteouts (0/0 character
//! devices, opaque xattrs) turned into OCI `.wh.` entries — nothing outside the tree is ever
//! read. The layer is then unpacked into the store by the same hostile-layer unpacker as a
//! pulled one (setuid bits, `..` names, byte, entry and depth caps). The names given must be
//! new in the store: a sandbox cannot replace an image others run.

use std::os::fd::BorrowedFd;

use crate::build::{assemble, layer_from_tar, Assembly};
use crate::dockerfile;
use crate::error::ImageError;
use crate::oci::ConfigFile;
use crate::reference::Reference;
use crate::store::{ImageRecord, LayerRecord, Store};
use crate::unpack::Limits;

/// What [`commit`] is asked to do.
#[derive(Debug, Clone)]
pub struct CommitOptions {
    /// Names for the result; each must be new in the store. None: the image is known by its
    /// digest only (Docker's untagged commit; `cordon image prune` removes it, as
    /// `docker image prune` removes dangling images).
    pub names: Vec<Reference>,
    /// Caps on the new layer (and the image).
    pub limits: Limits,
    /// Where it came from, as `cordon image ls` shows it (`commit SANDBOX`).
    pub source: String,
    /// Dockerfile lines applied to the config: `ENV`, `CMD`, `ENTRYPOINT`, `WORKDIR`, `USER`,
    /// `LABEL` (no variable expansion).
    pub changes: Vec<String>,
}

/// What a commit made.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Committed {
    pub names: Vec<String>,
    #[serde(flatten)]
    pub record: ImageRecord,
    /// The new layer (the sandbox's changes).
    pub layer: LayerRecord,
    /// The image it was made from (manifest digest).
    pub base: String,
}

/// Makes a new image of `base` (an image of the store: a name or manifest digest) plus the
/// overlayfs upper directory `upper` as its top layer.
pub fn commit(
    store: &Store,
    base: &str,
    upper: BorrowedFd<'_>,
    opts: &CommitOptions,
) -> Result<Committed, ImageError> {
    if let Some(n) = opts.names.iter().find(|n| n.digest.is_some()) {
        return Err(ImageError::InvalidReference {
            reference: n.to_string(),
            reason: "a commit's name is NAME[:TAG]; the digest is the image's own".into(),
        });
    }
    let mut config_changes = Vec::new();
    for c in &opts.changes {
        config_changes.extend(dockerfile::parse(c)?);
    }
    let w = store.writer()?;
    let found = store.find(base)?;
    let config = ConfigFile::parse(&w.store.read_document(&found.record.config)?)?;
    for l in &found.record.layers {
        if w.existing_layer(&l.diff_id).is_none() {
            return Err(ImageError::format(
                format!("image {}", found.record.digest),
                format!("layer {} is missing from the store", l.diff_id),
            ));
        }
    }
    let mut image_config = config.config.clone().unwrap_or_default();
    for ins in &config_changes {
        apply_change(&mut image_config, ins)?;
    }
    if found.record.layers.len() >= crate::build::MAX_LAYERS {
        return Err(ImageError::Limit(format!(
            "image {} has {} layers already: one more passes overlayfs' limit of {}",
            found.record.digest,
            found.record.layers.len(),
            crate::build::MAX_LAYERS
        )));
    }
    let (layer, _) = layer_from_tar(&w, &opts.limits, None, |tb| tb.tree(upper, "", true))?;
    let mut layers = found.record.layers.clone();
    layers.push(layer.clone());
    let record = assemble(
        &w,
        Assembly {
            layers,
            config: image_config,
            platform: config.platform(),
        },
        &opts.names,
        opts.source.clone(),
        true,
    )?;
    Ok(Committed {
        names: opts.names.iter().map(|n| n.to_string()).collect(),
        record,
        layer,
        base: found.record.digest.to_string(),
    })
}

fn change_err(ins: &dockerfile::Instruction, why: impl std::fmt::Display) -> ImageError {
    ImageError::format(format!("change {}", ins.display()), why.to_string())
}

/// One `--change` line applied to the config, as `docker commit --change` does.
fn apply_change(
    c: &mut crate::oci::ImageConfig,
    ins: &dockerfile::Instruction,
) -> Result<(), ImageError> {
    match ins.keyword.as_str() {
        "ENV" => {
            let mut env = c.env.clone().unwrap_or_default();
            for (k, v) in dockerfile::pairs(&ins.args, true).map_err(|e| change_err(ins, e))? {
                let Some(v) = v else {
                    return Err(change_err(ins, format!("{k} has no value (ENV KEY=VALUE)")));
                };
                env.retain(|e| e.split_once('=').map(|(n, _)| n) != Some(k.as_str()));
                env.push(format!("{k}={v}"));
            }
            c.env = Some(env);
        }
        "LABEL" => {
            let mut labels = c.labels.clone().unwrap_or_default();
            for (k, v) in dockerfile::pairs(&ins.args, true).map_err(|e| change_err(ins, e))? {
                labels.insert(k, v.unwrap_or_default());
            }
            c.labels = Some(labels);
        }
        "USER" => {
            let u = ins.args.trim();
            if u.is_empty() {
                return Err(change_err(ins, "USER needs a user"));
            }
            c.user = Some(u.to_string());
        }
        "WORKDIR" => {
            let d = ins.args.trim();
            if !d.starts_with('/') {
                return Err(change_err(ins, "WORKDIR needs an absolute directory"));
            }
            c.working_dir = Some(d.to_string());
        }
        "CMD" | "ENTRYPOINT" => {
            let argv = match ins.json() {
                Some(v) => v,
                None if ins.args.trim_start().starts_with('[') => {
                    return Err(change_err(ins, "not a JSON array of strings"))
                }
                None => vec!["/bin/sh".into(), "-c".into(), ins.args.clone()],
            };
            if ins.keyword == "CMD" {
                c.cmd = Some(argv);
            } else {
                c.entrypoint = Some(argv);
            }
        }
        "EXPOSE" => {
            let mut ports = c.exposed_ports.clone().unwrap_or_default();
            for p in ins.args.split_whitespace() {
                let (num, proto) = p.split_once('/').unwrap_or((p, "tcp"));
                let ok_num = num.parse::<u16>().is_ok_and(|n| n > 0);
                let ok_proto = matches!(proto.to_ascii_lowercase().as_str(), "tcp" | "udp" | "sctp");
                if !ok_num || !ok_proto {
                    return Err(change_err(ins, format!("{p}: PORT[/tcp|udp|sctp]")));
                }
                ports.insert(
                    format!("{num}/{}", proto.to_ascii_lowercase()),
                    serde_json::json!({}),
                );
            }
            if ports.is_empty() {
                return Err(change_err(ins, "EXPOSE needs a port"));
            }
            c.exposed_ports = Some(ports);
        }
        other => {
            return Err(change_err(
                ins,
                format!("{other} cannot be a commit's change (ENV, CMD, ENTRYPOINT, WORKDIR, USER, LABEL and EXPOSE can)"),
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(c: &mut crate::oci::ImageConfig, line: &str) -> Result<(), ImageError> {
        for ins in dockerfile::parse(line)? {
            apply_change(c, &ins)?;
        }
        Ok(())
    }

    #[test]
    fn changes_override_the_config_and_other_instructions_are_refused_by_name() {
        let mut c = crate::oci::ImageConfig {
            env: Some(vec!["A=1".into(), "B=2".into()]),
            ..Default::default()
        };
        change(&mut c, "ENV A=3").unwrap();
        change(&mut c, "CMD [\"cat\", \"/x\"]").unwrap();
        change(&mut c, "ENTRYPOINT echo hi").unwrap();
        change(&mut c, "WORKDIR /app").unwrap();
        change(&mut c, "USER 1000").unwrap();
        assert_eq!(c.env, Some(vec!["B=2".into(), "A=3".into()]));
        assert_eq!(c.cmd, Some(vec!["cat".into(), "/x".into()]));
        assert_eq!(
            c.entrypoint,
            Some(vec!["/bin/sh".into(), "-c".into(), "echo hi".into()])
        );
        assert_eq!(c.working_dir.as_deref(), Some("/app"));
        assert_eq!(c.user.as_deref(), Some("1000"));
        let e = change(&mut c, "RUN rm -rf /").unwrap_err().to_string();
        assert!(e.contains("RUN cannot be a commit's change"), "{e}");
        let e = change(&mut c, "WORKDIR app").unwrap_err().to_string();
        assert!(e.contains("absolute"), "{e}");
        change(&mut c, "EXPOSE 8000 53/UDP").unwrap();
        let ports: Vec<&String> = c.exposed_ports.as_ref().expect("ports").keys().collect();
        assert_eq!(ports, ["53/udp", "8000/tcp"]);
        for bad in ["EXPOSE 0", "EXPOSE 70000", "EXPOSE 80/icmp", "EXPOSE x"] {
            assert!(change(&mut c, bad).is_err(), "{bad}");
        }
    }
}
