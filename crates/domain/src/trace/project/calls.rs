//! Provider calls: the `chat` span an `agent:start` opens.

use super::{Fold, content};
use crate::RuntimeEvent;
use crate::trace::{Attributes, SpanKind, span_id};

impl Fold {
    pub(super) fn chat_of(&self, event: &RuntimeEvent) -> Option<usize> {
        self.open.get(&event.node_run_id?)?.chat
    }

    pub(super) fn chat_started(
        &mut self,
        event: &RuntimeEvent,
        session: String,
        model: Option<&str>,
        prompt: &crate::event::Prompt,
    ) {
        let at = event.timestamp;
        let Some(node) = self.open_node(event) else {
            return;
        };
        // What an earlier call failed of is not why a later one would.
        node.failure = None;
        let (previous, node) = (node.chat.take(), node.span);
        if let Some(previous) = previous {
            self.close(previous, at);
        }
        let parent = self.spans[node].span_id;
        let provider = (event.node_id.as_ref())
            .and_then(|n| self.input.nodes.get(n))
            .and_then(|facts| facts.provider.clone());
        let mut attributes = Attributes::for_span();
        attributes.text("gen_ai.operation.name", "chat");
        if let Some(provider) = provider {
            attributes.text("gen_ai.provider.name", provider);
        }
        if let Some(model) = model {
            attributes.text("gen_ai.request.model", model);
        }
        attributes.text("gen_ai.conversation.id", session);
        attributes.int("awr.offset", event.offset.get());
        if self.input.capture_content {
            attributes.text("gen_ai.input.messages", content::input_messages(prompt));
        }
        let name = match model {
            Some(model) => format!("chat {model}"),
            None => "chat".to_owned(),
        };
        let id = span_id(self.run, &event.offset.get().to_string());
        let chat = self.open_span(id, Some(parent), name, SpanKind::Client, at, attributes);
        if let Some(node) = self.open_node(event) {
            node.chat = Some(chat);
        }
    }
}
