//! The `store` section: the circuit breaker, the fallback's share and the
//! batched leases the server puts around its store.

use std::time::Duration;

use serde_saphyr::{Location, Spanned};
use tollgate::{BatchConfig, BreakerConfig};

use super::raw;
use super::ConfigError;

/// How the server guards and batches its calls to the store. Read at start:
/// a reload that changes it keeps the running settings and says so.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreSettings {
    /// Instances sharing the store: each one's fallback decides with the
    /// limit divided by this (`on_store_error: fallback`).
    pub instances: u32,
    /// When the breaker opens and how it recovers.
    pub breaker: BreakerConfig,
    /// Hot keys leased in batches, when the section asks for it.
    pub batch: Option<BatchConfig>,
}

impl Default for StoreSettings {
    /// One instance, the library's breaker, no batching.
    fn default() -> Self {
        StoreSettings {
            instances: 1,
            breaker: BreakerConfig::default(),
            batch: None,
        }
    }
}

/// Builds the settings of a `store` section; errors point at the section.
pub(super) fn build(
    file: &str,
    section: Spanned<raw::Store>,
) -> Result<StoreSettings, ConfigError> {
    let at = section.referenced;
    let error = |message: String| ConfigError::at(file, at, message);
    let raw = section.value;
    let mut settings = StoreSettings::default();
    if let Some(instances) = raw.instances {
        if instances == 0 {
            return Err(error("`store.instances` must be at least 1".into()));
        }
        settings.instances = instances;
    }
    if let Some(breaker) = raw.breaker {
        settings.breaker = build_breaker(&breaker, at, file)?;
    }
    if let Some(batch) = raw.batch {
        settings.batch = Some(build_batch(&batch, at, file)?);
    }
    Ok(settings)
}

fn build_breaker(
    raw: &raw::Breaker,
    at: Location,
    file: &str,
) -> Result<BreakerConfig, ConfigError> {
    let error = |message: String| ConfigError::at(file, at, message);
    let mut config = BreakerConfig::default();
    if let Some(failures) = raw.consecutive_failures {
        config = config.consecutive(failures);
    }
    let (mut ratio, mut min_calls, mut window) = config.ratio_rule();
    if let Some(r) = raw.failure_ratio {
        if !(r > 0.0 && r <= 1.0) {
            return Err(error(format!(
                "`store.breaker.failure_ratio` must be above 0 and at most 1, not {r}"
            )));
        }
        ratio = r;
    }
    if let Some(calls) = raw.min_calls {
        if calls == 0 {
            return Err(error("`store.breaker.min_calls` must be at least 1".into()));
        }
        min_calls = calls;
    }
    if let Some(text) = &raw.window {
        window = duration("store.breaker.window", text).map_err(error)?;
    }
    config = config.failure_ratio(ratio, min_calls, window);
    if let Some(text) = &raw.open_for {
        config = config.open_for(duration("store.breaker.open_for", text).map_err(error)?);
    }
    if let Some(probes) = raw.probes {
        if probes == 0 {
            return Err(error("`store.breaker.probes` must be at least 1".into()));
        }
        config = config.probes(probes);
    }
    Ok(config)
}

fn build_batch(raw: &raw::Batch, at: Location, file: &str) -> Result<BatchConfig, ConfigError> {
    let error = |message: String| ConfigError::at(file, at, message);
    let mut config = BatchConfig::default();
    if let Some(size) = raw.size {
        if size == 0 {
            return Err(error("`store.batch.size` must be at least 1".into()));
        }
        config = config.batch(size);
    }
    if let Some(rate) = raw.hot_rate {
        config = config.hot_rate(rate);
    }
    if let Some(text) = &raw.lease_ttl {
        config = config.lease_ttl(duration("store.batch.lease_ttl", text).map_err(error)?);
    }
    if let Some(leases) = raw.max_leases {
        config = config.max_leases(leases);
    }
    Ok(config)
}

/// A positive duration such as `1s` or `250ms`.
fn duration(field: &str, text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("`{field}`: `{text}` is not a positive duration (e.g. 1s, 250ms)"))
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, StoreErrorMode, StoreSettings};

    fn store(section: &str) -> Result<StoreSettings, String> {
        let yaml = format!(
            "domain: d\ndescriptors:\n  - key: k\n    on_store_error: fallback\n    rate_limit: {{ unit: second, requests_per_unit: 1 }}\nstore:\n{section}"
        );
        Config::parse("f.yaml", &yaml)
            .map(|c| c.store().clone())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn absent_fields_keep_the_library_defaults() {
        let config = Config::parse("f.yaml", "domain: d\n").unwrap();
        assert_eq!(config.store(), &StoreSettings::default());
        let set =
            store("  instances: 4\n  breaker: { open_for: 5s }\n  batch: { size: 20 }\n").unwrap();
        assert_eq!(set.instances, 4);
        let expected =
            tollgate::BreakerConfig::default().open_for(std::time::Duration::from_secs(5));
        assert_eq!(set.breaker, expected);
        assert_eq!(set.batch, Some(tollgate::BatchConfig::default().batch(20)));
        let with_fallback = "domain: d\ndescriptors:\n  - key: k\n    on_store_error: fallback\n    rate_limit: { unit: second, requests_per_unit: 1 }\n";
        let config = Config::parse("f.yaml", with_fallback).unwrap();
        assert_eq!(config.entries()[0].on_store_error, StoreErrorMode::Fallback);
    }

    #[test]
    fn bad_settings_are_located_errors() {
        for (section, says) in [
            ("  instances: 0\n", "`store.instances` must be at least 1"),
            (
                "  breaker: { failure_ratio: 1.5 }\n",
                "`store.breaker.failure_ratio` must be above 0",
            ),
            (
                "  breaker: { probes: 0 }\n",
                "`store.breaker.probes` must be at least 1",
            ),
            (
                "  breaker: { open_for: soon }\n",
                "`store.breaker.open_for`: `soon` is not a positive duration",
            ),
            (
                "  batch: { size: 0 }\n",
                "`store.batch.size` must be at least 1",
            ),
            (
                "  batch: { lease_ttl: 0s }\n",
                "`store.batch.lease_ttl`: `0s` is not a positive duration",
            ),
            ("  batch: { sise: 10 }\n", "unknown field"),
        ] {
            let error = store(section).unwrap_err();
            assert!(error.contains(says), "{section}: {error}");
            assert!(error.starts_with("f.yaml:"), "{error}");
        }
    }
}
