//! The Lua library, and the same source as an `EVAL` script for servers
//! without Redis Functions (before Redis 7).

use std::sync::LazyLock;

/// The Redis Function library (`FUNCTION LOAD REPLACE`), one file for all
/// seven algorithms.
pub const LIBRARY: &str = include_str!("../lua/tollgate.lua");

/// The function every call of the backend runs: one entry point for every
/// operation, named with the version of its arguments (see the library).
pub const FUNCTION: &str = "tollgate_v4";

/// The same entry point declared read-only (`FCALL_RO`), for peeks: it
/// works on a full server, where Redis refuses functions that may write.
pub const PEEK_FUNCTION: &str = "tollgate_v4_peek";

/// Several calls of [`FUNCTION`] in one, run in order at one reading of the
/// server's clock (see the library): what [`crate::RedisConfig::fold`] sends.
pub const FOLD_FUNCTION: &str = "tollgate_v4_fold";

/// How decisions reach the script.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScriptMode {
    /// Functions when the server has them (Redis 7+), else `EVALSHA`.
    #[default]
    Auto,
    /// `FCALL` on the library loaded with `FUNCTION LOAD REPLACE`.
    Functions,
    /// `EVALSHA` of [`eval_script`], loaded with `SCRIPT LOAD`.
    Eval,
}

/// The library as an `EVAL` script: its `#!lua` line becomes a one-line
/// preamble (so line numbers in errors still match the file) that shadows
/// `redis` with a table capturing `register_function`, and a last line calls
/// the captured function with `KEYS` and `ARGV`. (A script without flags
/// is refused on a full server only when it writes, so peeks need no twin.)
pub fn eval_script() -> &'static str {
    static SCRIPT: LazyLock<String> = LazyLock::new(|| {
        let body = LIBRARY.split_once('\n').map_or("", |(_, rest)| rest);
        format!(
            "local registered = {{}} local redis = setmetatable({{ register_function = \
             function(name, f) if type(name) == 'table' then \
             registered[name.function_name] = name.callback else registered[name] = f end \
             end }}, {{ __index = redis }})\n\
             {body}\nreturn registered['{FUNCTION}'](KEYS, ARGV)\n"
        )
    });
    &SCRIPT
}

/// The SHA-1 of [`eval_script`], as `EVALSHA` wants it.
pub fn eval_sha() -> &'static str {
    static SHA: LazyLock<String> =
        LazyLock::new(|| sha1_smol::Sha1::from(eval_script()).digest().to_string());
    &SHA
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eval_script_keeps_line_numbers() {
        assert!(LIBRARY.starts_with("#!lua name=tollgate\n"));
        let lib: Vec<_> = LIBRARY.lines().collect();
        let eval: Vec<_> = eval_script().lines().collect();
        assert_eq!(&eval[1..lib.len()], &lib[1..]);
        assert!(eval[0].starts_with("local registered"));
        assert_eq!(eval_sha().len(), 40);
    }
}
