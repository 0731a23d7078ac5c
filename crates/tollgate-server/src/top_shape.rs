//! The shape of the heavy-hitter summaries behind `/v1/top`, `/top` and the
//! `detailed_metric` series: keys kept per limit, sub-window length and
//! number. Set by the file's `top` section or the flags (`--top-keys`,
//! `--top-sub-window`, `--top-sub-windows`, which win), read at start, and
//! checked here, once for both, so that `--check`, start and reload refuse
//! the same values with the same words.

use std::time::Duration;

use tollgate::top::TopConfig;

/// The most keys a summary keeps per sub-window: beyond, a report costs
/// more than a page refresh should, and the error bound is already tiny.
pub const MAX_KEYS: usize = 10_000;
/// The shortest sub-window: the page polls every 3 s.
pub const MIN_SUB_WINDOW: Duration = Duration::from_secs(1);
/// The longest sub-window: `/v1/top` reports the last minute and ten.
pub const MAX_SUB_WINDOW: Duration = Duration::from_secs(3600);
/// The most sub-windows kept.
pub const MAX_SUB_WINDOWS: usize = 1440;
/// The most keys one limit's summaries hold (keys × sub-windows × stripes,
/// the stripes cut down to stay within, see [`TopSettings::shape`]): about
/// 150 bytes each plus the key, so some 200 MB per limit at most.
pub const MAX_TRACKED: usize = 1_000_000;

/// The summaries' shape as given: each `None` leaves the choice to the
/// next source, then to [`TopConfig::default`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TopSettings {
    /// Keys kept per limit and sub-window (`k`).
    pub keys: Option<usize>,
    /// The length of a sub-window.
    pub sub_window: Option<Duration>,
    /// How many sub-windows are kept.
    pub sub_windows: Option<usize>,
}

/// Why a [`TopSettings`] is refused: the setting, and what it must be.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{setting}` {message}")]
pub struct TopShapeError {
    /// The setting's name in the file's `top` section.
    pub setting: &'static str,
    /// What it must be.
    pub message: String,
}

impl TopSettings {
    /// These settings, with `fallback`'s where these have none.
    pub fn or(self, fallback: TopSettings) -> TopSettings {
        TopSettings {
            keys: self.keys.or(fallback.keys),
            sub_window: self.sub_window.or(fallback.sub_window),
            sub_windows: self.sub_windows.or(fallback.sub_windows),
        }
    }

    /// The shape, defaults filled in, or the first setting out of bounds.
    pub fn shape(self) -> Result<TopConfig, TopShapeError> {
        let default = TopConfig::default();
        let keys = self.keys.unwrap_or(default.capacity());
        let sub_window = self
            .sub_window
            .unwrap_or(Duration::from_nanos(default.sub_window_ns()));
        let sub_windows = self.sub_windows.unwrap_or(default.sub_windows());
        let refuse = |setting, message: String| Err(TopShapeError { setting, message });
        if !(1..=MAX_KEYS).contains(&keys) {
            return refuse("keys", format!("must be from 1 to {MAX_KEYS}, not {keys}"));
        }
        if !(MIN_SUB_WINDOW..=MAX_SUB_WINDOW).contains(&sub_window) {
            return refuse(
                "sub_window",
                format!(
                    "must be from 1s to 1h, not {}",
                    humantime::format_duration(sub_window)
                ),
            );
        }
        if !(1..=MAX_SUB_WINDOWS).contains(&sub_windows) {
            return refuse(
                "sub_windows",
                format!("must be from 1 to {MAX_SUB_WINDOWS}, not {sub_windows}"),
            );
        }
        if keys * sub_windows > MAX_TRACKED {
            return refuse(
                "keys",
                format!(
                    "times `sub_windows` ({keys} × {sub_windows}) must be at most {MAX_TRACKED}, \
                     the keys one limit's summaries may hold"
                ),
            );
        }
        let sub_window_ns = u64::try_from(sub_window.as_nanos()).unwrap_or(u64::MAX);
        let shape =
            TopConfig::new(keys, sub_window_ns, sub_windows).map_err(|e| TopShapeError {
                setting: "keys",
                message: e.to_string(),
            })?;
        // One stripe per core (up to 8) while the keys held stay within
        // the bound: what a file may say then does not depend on the cores.
        let fitting = MAX_TRACKED / (keys * sub_windows);
        let mut stripes = shape.stripe_count();
        while stripes > fitting {
            stripes /= 2;
        }
        Ok(shape.stripes(stripes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_are_cut_down_to_keep_the_bound_on_keys_held() {
        let at_most = |keys, sub_windows| {
            let shape = TopSettings {
                keys: Some(keys),
                sub_windows: Some(sub_windows),
                ..TopSettings::default()
            }
            .shape()
            .expect("valid");
            assert!(keys * sub_windows * shape.stripe_count() <= MAX_TRACKED);
            shape.stripe_count()
        };
        assert_eq!(at_most(10_000, 100), 1);
        assert_eq!(
            at_most(100, 60),
            TopConfig::default().stripe_count(),
            "the default shape keeps one stripe per core"
        );
    }

    #[test]
    fn nothing_given_is_the_librarys_default() {
        assert_eq!(TopSettings::default().shape(), Ok(TopConfig::default()));
    }

    #[test]
    fn absurd_values_name_their_setting() {
        let with = |keys, sub_window_s, sub_windows| TopSettings {
            keys: Some(keys),
            sub_window: Some(Duration::from_secs(sub_window_s)),
            sub_windows: Some(sub_windows),
        };
        let setting = |s: TopSettings| s.shape().map_err(|e| e.setting);
        assert_eq!(setting(with(0, 10, 60)), Err("keys"));
        assert_eq!(setting(with(1_000_000_000, 10, 60)), Err("keys"));
        assert_eq!(setting(with(10, 0, 60)), Err("sub_window"));
        assert_eq!(setting(with(10, 86_400, 60)), Err("sub_window"));
        assert_eq!(setting(with(10, 10, 0)), Err("sub_windows"));
        assert_eq!(setting(with(10_000, 10, 1440)), Err("keys"));
        let shape = with(20, 5, 12).shape().expect("valid");
        assert_eq!(
            (shape.capacity(), shape.sub_window_ns(), shape.sub_windows()),
            (20, 5_000_000_000, 12)
        );
    }

    #[test]
    fn the_first_source_wins() {
        let flags = TopSettings {
            keys: Some(5),
            ..TopSettings::default()
        };
        let file = TopSettings {
            keys: Some(50),
            sub_windows: Some(6),
            ..TopSettings::default()
        };
        assert_eq!(
            flags.or(file),
            TopSettings {
                keys: Some(5),
                sub_window: None,
                sub_windows: Some(6)
            }
        );
    }
}
