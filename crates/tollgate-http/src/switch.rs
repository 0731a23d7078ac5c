//! [`KillSwitch`]: turns every rule of a layer to shadow at run time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A switch shared by a layer and whoever holds a clone (an admin endpoint, a
/// signal handler): while it is on, every rule decides, counts and logs as
/// usual but denies and delays nothing, as if each were in shadow mode.
///
/// ```
/// let switch = tollgate_http::KillSwitch::new();
/// switch.shadow_all(true); // incident: let everything through, keep counting
/// assert!(switch.is_shadow_all());
/// switch.shadow_all(false);
/// ```
#[derive(Clone, Debug, Default)]
pub struct KillSwitch(Arc<AtomicBool>);

impl KillSwitch {
    /// A switch that is off: rules enforce as configured.
    pub fn new() -> Self {
        KillSwitch::default()
    }

    /// Turns every rule to shadow (`true`) or back to its own mode.
    pub fn shadow_all(&self, on: bool) {
        self.0.store(on, Ordering::Relaxed);
    }

    /// Whether every rule is in shadow.
    pub fn is_shadow_all(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
