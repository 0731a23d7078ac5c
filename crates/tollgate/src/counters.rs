//! Counters a layer keeps with atomics and hands out as a plain snapshot.

/// Defines a public snapshot struct of `u64` counts and a private struct of
/// atomics with the same fields, whose `snapshot` fills it.
macro_rules! counters {
    (
        $(#[$meta:meta])*
        pub struct $stats:ident, kept in $atomic:ident {
            $($(#[$field_meta:meta])* $field:ident,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $stats {
            $($(#[$field_meta])* pub $field: u64,)*
        }

        #[derive(Default)]
        struct $atomic {
            $($field: std::sync::atomic::AtomicU64,)*
        }

        impl $atomic {
            fn snapshot(&self) -> $stats {
                $stats {
                    $($field: self.$field.load(std::sync::atomic::Ordering::Relaxed),)*
                }
            }
        }
    };
}

pub(crate) use counters;
