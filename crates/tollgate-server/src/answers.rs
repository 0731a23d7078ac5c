//! How `tollgate serve` answers: envoyproxy/ratelimit's way by default,
//! tollgate's own one setting away, and envoyproxy/ratelimit's global
//! switches that change answers (`docs/SERVER.md`, "Decisions").

/// Which rules count the hits of a limit written in envoyproxy/ratelimit's
/// form (one fixed window).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Counting {
    /// envoyproxy/ratelimit's: every hit is counted, refused ones too; an
    /// over-limit answer says 0 remaining; the reset time is always sent,
    /// in whole seconds, from the unit's window.
    #[default]
    Upstream,
    /// tollgate's: a refused request costs nothing, the numbers are the
    /// key's exact state, and the `RateLimit` fields go in
    /// `response_headers_to_add`.
    Tollgate,
}

/// The three header names envoyproxy/ratelimit adds to every answer when
/// `LIMIT_RESPONSE_HEADERS_ENABLED` is set, for the descriptor closest to
/// its limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitHeaders {
    /// The limit (`LIMIT_LIMIT_HEADER`, `RateLimit-Limit`).
    pub limit: String,
    /// What is left (`LIMIT_REMAINING_HEADER`, `RateLimit-Remaining`).
    pub remaining: String,
    /// Seconds until the window ends (`LIMIT_RESET_HEADER`, `RateLimit-Reset`).
    pub reset: String,
}

impl Default for LimitHeaders {
    fn default() -> Self {
        LimitHeaders {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

/// The settings that change answers.
#[derive(Clone, Debug, PartialEq)]
pub struct Answers {
    /// How hits are counted.
    pub counting: Counting,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: when one descriptor of a
    /// request would go over its limit, only the descriptors that would go
    /// over are charged; the others are left as they were.
    pub stop_increment_when_over: bool,
    /// `SHADOW_MODE`: the overall answer is always OK (each descriptor's
    /// status still says what it would have been).
    pub global_shadow: bool,
    /// `NEAR_LIMIT_RATIO`: an admitted hit past this share of the limit
    /// counts as near the limit in the statistics.
    pub near_limit_ratio: f32,
    /// `LIMIT_RESPONSE_HEADERS_ENABLED` with its header names.
    pub limit_headers: Option<LimitHeaders>,
}

impl Default for Answers {
    fn default() -> Self {
        Answers {
            counting: Counting::Upstream,
            stop_increment_when_over: false,
            global_shadow: false,
            near_limit_ratio: 0.8,
            limit_headers: None,
        }
    }
}

impl Answers {
    /// The count above which an admitted hit is near `limit`, as
    /// envoyproxy/ratelimit rounds it (down, in single precision).
    pub fn near_threshold(&self, limit: u64) -> u64 {
        (limit as f32 * self.near_limit_ratio).floor() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_threshold_rounds_down_as_upstream() {
        let answers = Answers::default();
        // envoyproxy/ratelimit test/redis/fixed_cache_impl_test.go: a limit
        // of 15 is near from the 13th hit (floor(15 * 0.8) = 12).
        assert_eq!(answers.near_threshold(15), 12);
        assert_eq!(answers.near_threshold(10), 8);
        assert_eq!(answers.near_threshold(0), 0);
    }
}
