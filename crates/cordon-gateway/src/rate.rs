//! Rate limits kept in the gateway process (no external service), per client and rule.
//! A limiter that cannot answer refuses: failing closed is the point of a limit.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

/// `N/second|minute|hour|day` as written in a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u32,
    pub per: Duration,
}

impl Rate {
    pub fn parse(text: &str) -> Result<Rate, String> {
        let bad = || {
            format!("'{text}' is not a rate: expected N/second, N/minute, N/hour or N/day (N ≥ 1), e.g. \"10/minute\"")
        };
        let (n, unit) = text.split_once('/').ok_or_else(bad)?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 {
            return Err(bad());
        }
        let secs = match unit.trim().trim_end_matches('s') {
            "second" | "sec" => 1,
            "minute" | "min" => 60,
            "hour" | "h" => 3600,
            "day" | "d" => 86400,
            _ => return Err(bad()),
        };
        Ok(Rate {
            count,
            per: Duration::from_secs(secs),
        })
    }
}

/// One rule's limiter, keyed by client.
pub struct Limiter {
    inner: DefaultKeyedRateLimiter<String>,
    rate: Rate,
}

impl Limiter {
    pub fn new(rate: Rate) -> Limiter {
        // N per period: a burst of N, refilled one every period/N.
        let count = NonZeroU32::new(rate.count).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::with_period(rate.per / rate.count)
            .unwrap_or_else(|| Quota::per_second(count))
            .allow_burst(count);
        Limiter {
            inner: DefaultKeyedRateLimiter::keyed(quota),
            rate,
        }
    }

    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Takes one call from `client`'s allowance, or says when the next one is allowed.
    pub fn check(&self, client: &str) -> Result<(), Duration> {
        match self.inner.check_key(&client.to_string()) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                // Never "retry in 0 s": the allowance refills in whole ticks.
                Err(wait.max(Duration::from_millis(1)))
            }
        }
    }

    /// Forgets clients whose allowance is full again (bounded memory under many clients).
    pub fn forget_idle(&self) {
        self.inner.retain_recent();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_explain() {
        assert_eq!(
            Rate::parse("10/minute"),
            Ok(Rate {
                count: 10,
                per: Duration::from_secs(60)
            })
        );
        assert_eq!(
            Rate::parse("2/seconds").unwrap().per,
            Duration::from_secs(1)
        );
        assert_eq!(
            Rate::parse("1/day").unwrap().per,
            Duration::from_secs(86400)
        );
        for bad in ["10", "0/minute", "x/minute", "10/fortnight", "-1/second"] {
            let e = Rate::parse(bad).unwrap_err();
            assert!(e.contains("N/minute"), "{e}");
        }
    }

    #[test]
    fn a_client_is_limited_alone_and_recovers() {
        let l = Limiter::new(Rate::parse("2/second").unwrap());
        assert!(l.check("a").is_ok());
        assert!(l.check("a").is_ok());
        let wait = l.check("a").unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(500),
            "{wait:?}"
        );
        assert!(l.check("b").is_ok(), "another client has its own allowance");
        std::thread::sleep(wait + Duration::from_millis(20));
        assert!(
            l.check("a").is_ok(),
            "recovered after the wait it announced"
        );
    }
}
