//! What a run's writer opens besides its log: the transcript and the
//! command endpoint.

use std::sync::Arc;

use domain::RunId;

use crate::ports::Listener;
use crate::run::transcript::TranscriptWriter;
use crate::run::{ExecutorError, Ports};

/// What a writer opens besides the log: the run's transcript and its
/// command endpoint. Independent of the run's state, so a resume opens them
/// while that state loads.
pub(crate) struct Endpoints {
    pub(super) transcript: Option<TranscriptWriter>,
    pub(super) listener: Option<Listener>,
}

impl Endpoints {
    /// Opens the transcript of `run_id`, fenced by the lease epoch its
    /// writer's lock was taken under (`epoch`, for a store that has them),
    /// and, when `listen`, its command endpoint (a run that cannot take
    /// commands still goes on).
    pub(crate) async fn open(
        ports: &Ports,
        run_id: RunId,
        epoch: Option<i64>,
        parent: Option<RunId>,
        listen: bool,
    ) -> Result<Self, ExecutorError> {
        let transcript = match &ports.transcripts {
            Some(t) => {
                let transcript = t.open(run_id, parent).await?;
                if let Some(epoch) = epoch {
                    transcript.fence(epoch);
                }
                Some(TranscriptWriter::new(transcript, Arc::clone(&ports.clock)))
            }
            None => None,
        };
        let listener = match ports.control.as_ref().filter(|_| listen) {
            Some(control) => match control.listen(run_id).await {
                Ok(listener) => Some(listener),
                Err(e) => {
                    // The run goes on; commands then wait for a later writer.
                    tracing::warn!(run = %run_id, error = %e, "cannot take commands for this run");
                    None
                }
            },
            None => None,
        };
        Ok(Self {
            transcript,
            listener,
        })
    }
}
