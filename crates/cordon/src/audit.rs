//! `cordon audit verify FILE`: checks a hash-chained audit log (the gateway's, or `cordon
//! serve`'s) against its own chain, its key and its head, and names the first record that was
//! altered, removed or reordered, or the records cut off its end. What a pass proves depends
//! on which anchors were there: the output says which.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use cordon_gateway::audit::{head_file, key_file, Anchor, Anchors, ChainError, ChainKey, Head};

#[derive(Args, Debug)]
pub struct AuditArgs {
    #[command(subcommand)]
    command: AuditCommand,
}

#[derive(Subcommand, Debug)]
enum AuditCommand {
    /// Check an audit log: its hash chain, its key and its head.
    #[command(after_help = "\
Each record carries its sequence number, the hash of the record before it and its own seal: \
an HMAC-SHA256 (`mac`) under the log's key, or a plain SHA-256 (`hash`) in a log or part of \
a log written before keys. `cordon serve` and `cordon gateway` keep the key in FILE.key and \
the head (the next record's number and the last seal) in FILE.head, beside the log, 0600, \
where no sandbox can reach; the head is replaced atomically after every record.

What a pass proves:
  chain (always): no record between the first and the last was altered, removed or \
reordered, and the log starts at record 0 (or exactly where --from-anchor says).
  + key: every sealed record was written by the holder of the key, so a log re-numbered and \
re-hashed, or rewritten whole, fails; a sealed record also fixes the plain ones before it.
  + head: nothing was cut off the end and the last record is the one written last.
Without a key, a log verifies as \"unkeyed: proves order only\": whoever can write the file \
can rewrite it whole. Without a head, records cut off the end cannot be seen. Neither holds \
against someone who can also write the key or head files: keep copies elsewhere (--key and \
--head take any path) to check against.

Exit status: 0 the log holds, 1 it is broken (the first break is named, with its line), 125 \
a file cannot be read or a sealed record has no key to check it.

Examples:
  cordon audit verify gateway-audit.jsonl
  cordon audit verify /var/lib/cordon/audit.jsonl --head /mnt/offsite/audit.jsonl.head
  cordon audit verify audit-2.jsonl --from-anchor 1200:HASH   # HASH: printed for audit-1.jsonl")]
    Verify {
        /// The JSONL log.
        file: PathBuf,
        /// The log's key file. Default: FILE.key, if it exists.
        #[arg(long, value_name = "KEYFILE")]
        key: Option<PathBuf>,
        /// The log's head file. Default: FILE.head, if it exists.
        #[arg(long, value_name = "HEADFILE")]
        head: Option<PathBuf>,
        /// For a log continuing a rotated one: SEQ:HASH, the next record number and the
        /// last hash `verify` printed for the part before.
        #[arg(long, value_name = "SEQ:HASH")]
        from_anchor: Option<String>,
    },
}

/// An anchor file: the one named (it must be readable), or the default beside the log (used
/// when it exists).
fn read_anchor<T>(
    given: Option<&Path>,
    default: PathBuf,
    parse: fn(&str) -> Result<T, String>,
) -> Result<Option<(PathBuf, T)>, String> {
    let path = given.map(Path::to_path_buf).unwrap_or(default);
    match std::fs::read_to_string(&path) {
        Ok(text) => parse(&text)
            .map(|v| Some((path.clone(), v)))
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if given.is_none() && e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

pub fn main(a: AuditArgs) -> i32 {
    match a.command {
        AuditCommand::Verify {
            file,
            key,
            head,
            from_anchor,
        } => {
            let anchors = (|| {
                let key = read_anchor(key.as_deref(), key_file(&file), ChainKey::parse)?;
                let head = read_anchor(head.as_deref(), head_file(&file), Head::parse)?;
                let from = from_anchor
                    .as_deref()
                    .map(Anchor::parse)
                    .transpose()
                    .map_err(|e| format!("--from-anchor: {e}"))?;
                Ok::<_, String>((key, head, from))
            })();
            let (key, head, from) = match anchors {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("cordon: {e}");
                    return 125;
                }
            };
            let f = match std::fs::File::open(&file) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("cordon: {}: {e}", file.display());
                    return 125;
                }
            };
            let anchors = Anchors {
                key: key.as_ref().map(|(_, k)| k.clone()),
                head: head.as_ref().map(|(_, h)| h.clone()),
                from,
            };
            match cordon_gateway::audit::verify_with(std::io::BufReader::new(f), &anchors) {
                Ok(v) => {
                    println!(
                        "{}: intact, {} records, last hash {}",
                        file.display(),
                        v.records,
                        v.last_hash
                    );
                    match &key {
                        Some((p, _)) => println!(
                            "  key {}: {} of them sealed with it{}",
                            p.display(),
                            v.keyed,
                            if v.keyed < v.records {
                                " (the plain ones before are fixed by the first sealed one)"
                            } else {
                                ""
                            }
                        ),
                        None => println!(
                            "  unkeyed: proves order only (no key file {}): whoever can write the log can rewrite it whole",
                            key_file(&file).display()
                        ),
                    }
                    match &head {
                        Some((p, _)) if v.past_head > 0 => println!(
                            "  head {}: reached; {} record(s) after it (written after the head was last saved, e.g. a crash between the two)",
                            p.display(),
                            v.past_head
                        ),
                        Some((p, _)) => println!("  head {}: the log ends where it says", p.display()),
                        None => println!(
                            "  no head file {}: records cut off the end cannot be seen",
                            head_file(&file).display()
                        ),
                    }
                    println!(
                        "  a log continuing this one: --from-anchor {}:{}",
                        v.next_seq, v.last_hash
                    );
                    0
                }
                Err(ChainError::Io(e)) => {
                    eprintln!("cordon: {}: {e}", file.display());
                    125
                }
                Err(e @ ChainError::NoKey { .. }) => {
                    eprintln!("cordon: {}: {e}", file.display());
                    125
                }
                Err(e) => {
                    println!("{}: BROKEN: {e}", file.display());
                    1
                }
            }
        }
    }
}
