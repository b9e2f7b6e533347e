//! What a run's writer opens besides its log: the transcript, the command
//! endpoint, the live export of its spans and its MCP servers.

use std::sync::Arc;

use domain::{RunId, WorkflowDef};

use crate::mcp::McpServers;
use crate::ports::Listener;
use crate::run::live::LiveSpans;
use crate::run::transcript::TranscriptWriter;
use crate::run::{ExecutorError, Ports};

/// What a writer opens besides the log: the run's transcript, its
/// command endpoint and the live export of its spans. Independent of the
/// run's state, so a resume opens them while that state loads.
pub(crate) struct Endpoints {
    pub(super) transcript: Option<TranscriptWriter>,
    pub(super) listener: Option<Listener>,
    pub(super) live: Option<LiveSpans>,
    /// The MCP servers the workflow declares, started on first need.
    pub(super) mcp: Option<Arc<McpServers>>,
}

impl Endpoints {
    /// Opens the transcript of `run_id`, fenced by the lease epoch its
    /// writer's lock was taken under (`epoch`, for a store that has them),
    /// and, when `listen`, its command endpoint (a run that cannot take
    /// commands still goes on), and the live export of the spans of
    /// `workflow`'s run, and the MCP servers it declares (none started yet).
    pub(crate) async fn open(
        ports: &Ports,
        run_id: RunId,
        epoch: Option<i64>,
        parent: Option<RunId>,
        listen: bool,
        workflow: &WorkflowDef,
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
        let live = LiveSpans::open(ports, run_id, parent, workflow).await;
        let mcp = (ports.mcp.as_ref())
            .and_then(|connector| McpServers::of(Arc::clone(connector), run_id, workflow))
            .map(Arc::new);
        Ok(Self {
            transcript,
            listener,
            live,
            mcp,
        })
    }
}
