//! `cordon audit verify FILE`: checks a hash-chained audit log (the gateway's, or `cordon
//! serve`'s) and names the first record that was altered, removed or reordered.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Args, Debug)]
pub struct AuditArgs {
    #[command(subcommand)]
    command: AuditCommand,
}

#[derive(Subcommand, Debug)]
enum AuditCommand {
    /// Check the hash chain of an audit log.
    #[command(
        after_help = "Each record carries its sequence number, the hash of the record \
before it and its own hash. Exit status: 0 the chain holds, 1 it is broken (the first break is \
named: altered, removed or reordered, with its line), 125 the file cannot be read.\n\n\
A chain cannot show records cut off its end, or a last record rewritten together with its \
hash: keep the printed count and last hash somewhere else to compare later.\n\n\
Example:\n  cordon audit verify gateway-audit.jsonl"
    )]
    Verify {
        /// The JSONL log.
        file: PathBuf,
    },
}

pub fn main(a: AuditArgs) -> i32 {
    match a.command {
        AuditCommand::Verify { file } => {
            let f = match std::fs::File::open(&file) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("cordon: {}: {e}", file.display());
                    return 125;
                }
            };
            match cordon_gateway::audit::verify(std::io::BufReader::new(f)) {
                Ok(v) => {
                    println!(
                        "{}: intact, {} records, last hash {}",
                        file.display(),
                        v.records,
                        v.last_hash
                    );
                    0
                }
                Err(cordon_gateway::audit::ChainError::Io(e)) => {
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
