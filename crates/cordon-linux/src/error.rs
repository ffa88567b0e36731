use std::io;

/// Why the engine could not run a sandbox (as opposed to the payload failing).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("sandbox setup failed at {step}: {message}")]
    Setup { step: String, message: String },
    #[error("this host cannot provide the required layer(s) {missing}: {hint}")]
    Required { missing: String, hint: String },
    #[error("{0}")]
    Invalid(String),
}

impl EngineError {
    pub(crate) fn io(what: impl Into<String>, source: impl Into<io::Error>) -> Self {
        EngineError::Io {
            what: what.into(),
            source: source.into(),
        }
    }
}
