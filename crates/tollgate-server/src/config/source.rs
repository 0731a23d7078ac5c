//! Where a configuration comes from: one file, or a directory of files as
//! envoyproxy/ratelimit reads its runtime directory (every file under it,
//! subdirectories included, one domain or more each, merged into one
//! [`Config`]).
//!
//! ```
//! use tollgate_server::config::Source;
//!
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n")?;
//! std::fs::write(dir.path().join("b.yaml"), "domain: b\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n")?;
//! let config = Source::new(dir.path()).load()?;
//! assert_eq!(config.entries().len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tollgate_http::ClientIp;

use super::{Config, ConfigError, StoreSettings};
use crate::store::MemorySettings;
use crate::top_shape::TopSettings;

/// How a directory is read and watched (a file ignores them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirectoryOptions {
    /// Read the files and directories whose name starts with a dot too
    /// (envoyproxy/ratelimit's `RUNTIME_IGNOREDOTFILES=false`). Off by
    /// default: a Kubernetes ConfigMap volume holds each file twice, once
    /// under a hidden `..2024_…` directory.
    pub dot_files: bool,
    /// A symbolic link whose replacement reloads too (envoyproxy/ratelimit's
    /// `RUNTIME_ROOT` with `RUNTIME_WATCH_ROOT=true`): deployments swap it
    /// to publish a new directory at once.
    pub root_link: Option<PathBuf>,
    /// A domain may be defined in several files, its descriptors put
    /// together (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG=true`); a
    /// top-level descriptor defined twice is still an error.
    pub merge_domains: bool,
}

/// A configuration file, or a directory of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// The file, or the directory whose files are read.
    pub path: PathBuf,
    /// How a directory is read and watched.
    pub directory: DirectoryOptions,
}

impl Source {
    /// `path`, with the default [`DirectoryOptions`].
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Source {
            path: path.into(),
            directory: DirectoryOptions::default(),
        }
    }

    /// Reads and merges every file: the whole configuration, or the first
    /// error, naming its file.
    pub fn load(&self) -> Result<Config, ConfigError> {
        let name = self.path.display().to_string();
        let meta = std::fs::metadata(&self.path)
            .map_err(|e| ConfigError::unlocated(&name, format!("cannot read: {e}")))?;
        if !meta.is_dir() {
            return Config::load(&self.path);
        }
        let mut files = Vec::new();
        self.collect(&self.path, &mut files)?;
        let mut merged = Merged {
            merge_domains: self.directory.merge_domains,
            ..Merged::default()
        };
        for file in files {
            merged.add(&file.display().to_string(), Config::load(&file)?)?;
        }
        if merged.config.domains.is_empty() && merged.config.http_rules.is_empty() {
            tracing::warn!(directory = %name, "the configuration directory defines no limit");
        }
        Ok(merged.config)
    }

    /// The files under `dir`, in name order, as envoyproxy/ratelimit walks
    /// its runtime directory: links to files are read, links to directories
    /// are not followed.
    fn collect(&self, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ConfigError> {
        let unreadable = |e: std::io::Error| {
            ConfigError::unlocated(
                &dir.display().to_string(),
                format!("cannot read the directory: {e}"),
            )
        };
        let mut entries = std::fs::read_dir(dir)
            .and_then(|list| list.collect::<Result<Vec<_>, _>>())
            .map_err(unreadable)?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            if hidden && !self.directory.dot_files {
                continue;
            }
            let path = entry.path();
            let kind = entry.file_type().map_err(unreadable)?;
            if kind.is_dir() {
                self.collect(&path, out)?;
            } else if kind.is_symlink() && path.is_dir() {
                tracing::debug!(path = %path.display(), "a link to a directory is not followed");
            } else {
                out.push(path);
            }
        }
        Ok(())
    }
}

/// Configurations of several files put together, each domain and HTTP rule
/// defined once.
#[derive(Default)]
struct Merged {
    config: Config,
    /// The file of each domain and HTTP rule, for the error on a second one.
    domains: HashMap<String, String>,
    rules: HashMap<String, String>,
    /// The file of each server-wide section (`store`, `memory`, `top`,
    /// `http.client_ip`): one file may set each.
    sections: HashMap<&'static str, String>,
    merge_domains: bool,
}

impl Merged {
    /// Records that `file` sets the server-wide `section`; a second file
    /// setting it is the error.
    fn claim(&mut self, section: &'static str, file: &str) -> Result<(), ConfigError> {
        match self.sections.insert(section, file.to_string()) {
            Some(first) => Err(ConfigError::unlocated(
                file,
                format!("the `{section}` section is already defined in {first}"),
            )),
            None => Ok(()),
        }
    }

    fn add(&mut self, file: &str, config: Config) -> Result<(), ConfigError> {
        let twice = |what: &str, first: &str| {
            // A ConfigMap volume's hidden copy is the usual cause.
            let hint = if first.contains("/.") || file.contains("/.") {
                " (a hidden copy? dot files are read: RUNTIME_IGNOREDOTFILES=true skips them)"
            } else {
                ""
            };
            ConfigError::unlocated(file, format!("{what} is already defined in {first}{hint}"))
        };
        for (domain, root) in config.domains {
            if let Some(first) = self.domains.get(&domain) {
                if !self.merge_domains {
                    return Err(twice(&format!("domain `{domain}`"), first));
                }
                let into = self.config.domains.get_mut(&domain).expect("seen before");
                into.merge(root)
                    .map_err(|key| twice(&format!("descriptor `{domain}.{key}`"), first))?;
                continue;
            }
            self.domains.insert(domain.clone(), file.to_string());
            self.config.domains.insert(domain, root);
        }
        for rule in &config.http_rules {
            let name = rule.name().to_string();
            if let Some(first) = self.rules.get(&name) {
                return Err(twice(&format!("HTTP rule `{name}`"), first));
            }
            self.rules.insert(name, file.to_string());
        }
        if config.http_client_ip != ClientIp::default() {
            self.claim("http.client_ip", file)?;
            self.config.http_client_ip = config.http_client_ip;
        }
        if config.memory != MemorySettings::default() {
            self.claim("memory", file)?;
            self.config.memory = config.memory;
        }
        if config.store != StoreSettings::default() {
            self.claim("store", file)?;
            self.config.store = config.store;
        }
        if config.top != TopSettings::default() {
            self.claim("top", file)?;
            self.config.top = config.top;
        }
        self.config.entries.extend(config.entries);
        self.config.http_rules.extend(config.http_rules);
        self.config.http_fallback.extend(config.http_fallback);
        self.config
            .http_descriptions
            .extend(config.http_descriptions);
        Ok(())
    }
}
