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
    /// `errno`: the kernel's answer to the step, when the step failed on a syscall.
    #[error("sandbox setup failed at {step}: {message}")]
    Setup {
        step: String,
        message: String,
        errno: Option<i32>,
    },
    #[error("this host cannot provide the required layer(s) {missing}: {hint}")]
    Required { missing: String, hint: String },
    #[error("{0}")]
    Invalid(String),
}

impl EngineError {
    /// The errno behind the error, when a syscall's failure was its cause: front ends decide
    /// from it what to tell their users (an HTTP status, say); the engine maps nothing.
    pub fn errno(&self) -> Option<i32> {
        match self {
            EngineError::Io { source, .. } => source.raw_os_error(),
            EngineError::Setup { errno, .. } => *errno,
            EngineError::Required { .. } | EngineError::Invalid(_) => None,
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: impl Into<io::Error>) -> Self {
        EngineError::Io {
            what: what.into(),
            source: source.into(),
        }
    }
}

/// What a failed setup step reports: its message, and the errno behind it when it has one.
pub(crate) trait StepFailure: std::fmt::Display {
    fn errno(&self) -> Option<i32> {
        None
    }
}

impl StepFailure for io::Error {
    fn errno(&self) -> Option<i32> {
        self.raw_os_error()
    }
}

impl StepFailure for crate::seccomp::SeccompError {
    fn errno(&self) -> Option<i32> {
        errno_in(self)
    }
}

impl StepFailure for String {}
impl StepFailure for &str {}

/// The errno of the first `io::Error` in `e`'s chain of causes.
fn errno_in(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            return io.raw_os_error();
        }
        cur = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setup_error_keeps_its_errno() {
        let e = EngineError::Setup {
            step: "seccomp".into(),
            message: "denied".into(),
            errno: Some(libc::EPERM),
        };
        assert_eq!(e.errno(), Some(libc::EPERM));
        assert_eq!(e.to_string(), "sandbox setup failed at seccomp: denied");
        let io = EngineError::io("channel", io::Error::from_raw_os_error(libc::EMFILE));
        assert_eq!(io.errno(), Some(libc::EMFILE));
        assert_eq!(EngineError::Invalid("x".into()).errno(), None);
    }

    #[test]
    fn the_errno_is_found_behind_a_wrapping_error() {
        let inner = seccompiler::Error::Seccomp(io::Error::from_raw_os_error(libc::EINVAL));
        let e = crate::seccomp::SeccompError::Install(inner);
        assert_eq!(StepFailure::errno(&e), Some(libc::EINVAL));
        assert_eq!(StepFailure::errno(&"no command"), None);
    }
}
