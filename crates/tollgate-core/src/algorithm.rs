use std::fmt;
use std::str::FromStr;

/// The seven rate-limiting algorithms of `docs/SEMANTICS.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// Counter per aligned window of `period`.
    FixedWindow,
    /// Exact log of admitted requests in the trailing `period`.
    SlidingLog,
    /// Weighted blend of the previous and current aligned windows.
    SlidingCounter,
    /// Tokens refilled at `limit / period`, capped at `burst`.
    TokenBucket,
    /// Generic cell rate algorithm: one theoretical arrival time.
    Gcra,
    /// Leaky bucket used as a meter: rejects what does not fit.
    LeakyBucket,
    /// Leaky bucket used as a queue (nginx `limit_req` without `nodelay`).
    LeakyQueue,
}

impl Algorithm {
    /// Every algorithm, in the order used by reports.
    pub const ALL: [Algorithm; 7] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingCounter,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::LeakyBucket,
        Algorithm::LeakyQueue,
    ];

    /// The canonical name (`fixed_window`, `gcra`, ...), as accepted by [`FromStr`].
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::SlidingCounter => "sliding_counter",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::LeakyBucket => "leaky_bucket",
            Algorithm::LeakyQueue => "leaky_queue",
        }
    }

    /// Whether the quota's `burst` applies (the bucket family and the queue).
    pub const fn uses_burst(self) -> bool {
        matches!(
            self,
            Algorithm::TokenBucket
                | Algorithm::Gcra
                | Algorithm::LeakyBucket
                | Algorithm::LeakyQueue
        )
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error for a name that is not one of [`Algorithm::ALL`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownAlgorithm(pub String);

impl fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown algorithm `{}`; expected one of: ", self.0)?;
        for (i, a) in Algorithm::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(a.name())?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownAlgorithm {}

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    /// Accepts the canonical name; `-` may stand for `_` and case is ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase().replace('-', "_");
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == wanted)
            .ok_or_else(|| UnknownAlgorithm(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
            assert_eq!(a.to_string(), a.name());
        }
        assert_eq!(
            "Leaky-Queue".parse::<Algorithm>(),
            Ok(Algorithm::LeakyQueue)
        );
    }

    #[test]
    fn unknown_name_lists_the_choices() {
        let err = "bogus".parse::<Algorithm>().unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("`bogus`"), "{msg}");
        assert!(msg.contains("leaky_queue"), "{msg}");
    }
}
