//! The supervisor's half of the setup handshake (the order is drawn in `channel.rs`): what
//! the sandbox side reported between `Go` and `Confined`, taken in that order, once each. Both
//! supervisors use it — a one-shot run's (`supervisor.rs`) and a persistent sandbox's helper
//! (`persistent/helper.rs`) — so the rule of which setup message is heard when lives here.
//!
//! Threat model: everything the sandbox side sends is untrusted. Before `Confined` it is our
//! own init speaking; after it, a message can only be the confined program's doing, so a setup
//! message that comes again or late is not taken (it goes back to the caller, which ignores
//! what it does not expect). The confinement report is checked against what the profile
//! requires here, not trusted to have been checked by the init.

use std::os::fd::OwnedFd;

use cordon_policy::Enforcement;

use crate::channel::{ToSupervisor, Watched};
use crate::launcher::apply_confined;

/// Why setup did not finish: the init's own report of a failed step, or a requirement of the
/// profile that the reported confinement does not meet.
#[derive(Debug, Clone)]
pub(crate) struct SetupFailure {
    /// The init's step that failed; `None` for a requirement the supervisor found unmet.
    pub step: Option<String>,
    pub message: String,
    pub errno: Option<i32>,
}

impl std::fmt::Display for SetupFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.step {
            Some(step) => write!(f, "{step}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// What one message was, for the caller.
pub(crate) enum Heard {
    /// A setup message, taken in its place (its fds kept here).
    Taken,
    /// Not a setup message in its place: the caller's to handle or ignore (any fds that
    /// came with it are closed: no later message carries one the supervisor wants).
    Other(ToSupervisor),
}

/// The setup messages heard so far. Fields are read by the supervisor that owns it.
pub(crate) struct SetupHeard {
    /// The plan has an egress proxy, so a listener is expected (and taken once).
    expect_listener: bool,
    listener_heard: bool,
    /// The proxy's listener, until the caller takes it.
    pub listener: Option<OwnedFd>,
    /// A persistent sandbox's root (`RootFd`), until the caller takes it.
    pub root: Option<OwnedFd>,
    /// With an image, the directory of its writable layer (`RootFd`'s second fd).
    pub writable: Option<OwnedFd>,
    /// The confinement report came and was applied: the payload may run.
    pub confined: bool,
    /// The scratch filesystems the init handed over with `Confined`, until the caller takes
    /// them (what each is, then the fds, in order).
    pub watched: Option<(Vec<Watched>, Vec<OwnedFd>)>,
    /// Set once, by the first failure.
    pub failure: Option<SetupFailure>,
}

impl SetupHeard {
    pub fn new(expect_listener: bool) -> Self {
        SetupHeard {
            expect_listener,
            listener_heard: false,
            listener: None,
            root: None,
            writable: None,
            confined: false,
            watched: None,
            failure: None,
        }
    }

    /// Takes `msg` if it is a setup message in its place. `degraded` and `require_landlock`
    /// are the plan's (see [`apply_confined`]). A confinement report that misses a required
    /// layer is taken, and recorded as the failure: the caller must end the sandbox (the init
    /// would run the payload otherwise).
    pub fn take(
        &mut self,
        msg: ToSupervisor,
        fds: Vec<OwnedFd>,
        enforcement: &mut Enforcement,
        degraded: Option<bool>,
        require_landlock: bool,
    ) -> Heard {
        match msg {
            ToSupervisor::RootFd if !self.confined && self.root.is_none() => {
                let mut fds = fds.into_iter();
                self.root = fds.next();
                self.writable = fds.next();
            }
            ToSupervisor::ProxyListener
                if !self.confined && self.expect_listener && !self.listener_heard =>
            {
                self.listener_heard = true;
                self.listener = fds.into_iter().next();
            }
            ToSupervisor::Confined {
                landlock_abi,
                ref watch,
                ..
            } if !self.confined => {
                self.confined = true;
                apply_confined(enforcement, &msg, degraded);
                self.watched = Some((watch.clone(), fds));
                if require_landlock && landlock_abi == 0 {
                    self.fail(
                        None,
                        "Landlock was required but is not enforced".into(),
                        None,
                    );
                }
            }
            // The init's last steps (a persistent init's signalfd, finding the payload) come
            // after its report: a failure counts until the first one is recorded.
            ToSupervisor::SetupFailed {
                step,
                message,
                errno,
            } if self.failure.is_none() => self.fail(Some(step), message, errno),
            other => return Heard::Other(other),
        }
        Heard::Taken
    }

    fn fail(&mut self, step: Option<String>, message: String, errno: Option<i32>) {
        if self.failure.is_none() {
            self.failure = Some(SetupFailure {
                step,
                message,
                errno,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confined(abi: u32) -> ToSupervisor {
        ToSupervisor::Confined {
            landlock_abi: abi,
            landlock_partial: false,
            seccomp: true,
            rlimits: true,
            notes: vec![],
            watch: vec![],
        }
    }

    #[test]
    fn setup_messages_after_the_confinement_report_are_not_taken() {
        let mut heard = SetupHeard::new(true);
        let mut enf = Enforcement::default();
        assert!(matches!(
            heard.take(confined(6), vec![], &mut enf, None, false),
            Heard::Taken
        ));
        assert!(heard.confined && heard.failure.is_none());
        // Nothing can hand over a listener, a root or a second report once confined.
        for late in [
            ToSupervisor::ProxyListener,
            ToSupervisor::RootFd,
            confined(0),
        ] {
            assert!(matches!(
                heard.take(late, vec![], &mut enf, None, true),
                Heard::Other(_)
            ));
        }
        assert!(heard.failure.is_none());
        assert_eq!(enf.landlock_abi, 6);
    }

    #[test]
    fn a_listener_is_taken_once_and_only_when_the_plan_has_a_proxy() {
        let mut enf = Enforcement::default();
        let mut without = SetupHeard::new(false);
        assert!(matches!(
            without.take(ToSupervisor::ProxyListener, vec![], &mut enf, None, false),
            Heard::Other(_)
        ));
        let mut with = SetupHeard::new(true);
        assert!(matches!(
            with.take(ToSupervisor::ProxyListener, vec![], &mut enf, None, false),
            Heard::Taken
        ));
        assert!(matches!(
            with.take(ToSupervisor::ProxyListener, vec![], &mut enf, None, false),
            Heard::Other(_)
        ));
    }

    #[test]
    fn a_report_without_a_required_landlock_is_a_failure_and_the_first_failure_stays() {
        let mut heard = SetupHeard::new(false);
        let mut enf = Enforcement::default();
        heard.take(confined(0), vec![], &mut enf, None, true);
        let failure = heard.failure.clone().map(|f| f.to_string());
        assert_eq!(
            failure.as_deref(),
            Some("Landlock was required but is not enforced")
        );
        let mut early = SetupHeard::new(false);
        for step in ["mount", "pivot"] {
            early.take(
                ToSupervisor::SetupFailed {
                    step: step.into(),
                    message: "no".into(),
                    errno: Some(1),
                },
                vec![],
                &mut enf,
                None,
                false,
            );
        }
        assert_eq!(
            early.failure.map(|f| f.to_string()).as_deref(),
            Some("mount: no")
        );
    }
}
