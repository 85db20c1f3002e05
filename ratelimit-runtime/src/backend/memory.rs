//! The embedded backend: the same semantics as the Redis scripts, in process.

use std::sync::Arc;

use super::{Backend, Request};
use crate::clock::{Clock, SystemClock};
use crate::decision::RawDecision;
use crate::BackendError;

pub(crate) struct MemoryBackend {
    clock: Arc<dyn Clock>,
}

impl MemoryBackend {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        MemoryBackend { clock }
    }

    pub fn system() -> Self {
        Self::new(Arc::new(SystemClock))
    }
}

impl Backend for MemoryBackend {
    async fn check(&self, _request: &Request<'_>) -> Result<RawDecision, BackendError> {
        let _ = &self.clock;
        todo!()
    }

    async fn reset(&self, _key: &str) -> Result<(), BackendError> {
        todo!()
    }
}
