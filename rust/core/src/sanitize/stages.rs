//! The four stages of the funnel, on [`Item`] records. README.md
//! ("sanitize") states each rule; the reference implements the same ones.

use std::collections::VecDeque;

use rustc_hash::{FxHashMap, FxHashSet as HashSet};

use super::gather::{self, Block, BlockKind, Call, Content, IdHash, Ids, Item, Role};
use super::patterns::{Junk, Patterns};
use super::plan::{BlockRef, CallRef, Change, OutContent, legacy_call_id};
use super::{OnInvalid, Options, Provider};
use crate::error::Result;
use crate::json::JsonValue;

pub(crate) struct Run<'m, J> {
    pub messages: &'m [J],
    pub options: &'m Options,
    pub patterns: &'m Patterns,
    pub changes: Vec<Change>,
    pub system: Vec<OutContent>,
    pub ids: Ids,
    /// Tool-call ids kept before these messages (a history's earlier part,
    /// answered already): a call reusing one is a duplicate.
    pub called_before: Vec<IdHash>,
}

impl<J: JsonValue> Run<'_, J> {
    fn change(&mut self, stage: u8, index: Option<usize>, action: &'static str, reason: String) {
        self.changes.push(Change {
            stage,
            index,
            action,
            reason,
        });
    }

    fn anthropic(&self) -> bool {
        self.options.provider == Provider::Anthropic
    }

    /// Stage 1: read every message; drop what the target API does not take,
    /// junk text and empty messages; lift system messages (Anthropic);
    /// convert legacy function messages (OpenAI, when asked).
    pub fn stage1(&mut self) -> Result<Vec<Item>> {
        let mut items = Vec::with_capacity(self.messages.len());
        // The latest assistant's legacy call, which a function result may answer.
        let mut open_legacy: Option<(usize, IdHash)> = None;
        for (index, message) in self.messages.iter().enumerate() {
            let mut item = match gather::read(index, message, &mut self.ids) {
                Ok(item) => item,
                Err(error) => {
                    let error = error.within(&format!("messages[{index}]"));
                    if self.options.on_invalid == OnInvalid::Raise {
                        return Err(error);
                    }
                    self.change(1, Some(index), "drop_invalid", error.to_string());
                    continue;
                }
            };
            if let Some(reason) = self.refused_role(index, &item) {
                self.change(1, Some(index), "drop_role", reason);
                continue;
            }
            self.drop_misplaced_blocks(&mut item);
            self.settle_calls(&mut item);
            if self.drop_if_junk(1, &item) {
                continue;
            }
            // A tool result needs content too (O8), even an empty string;
            // an empty list is refused. An empty list, or one of blank text
            // parts only (all dropped above: the one change to a tool
            // message's blocks), is an empty output: the empty string, as an
            // Anthropic tool result's is, and its call stays answered. One
            // with no content is dropped, and its call is closed as one with
            // no result.
            let tool = matches!(item.role, Role::Tool | Role::Function);
            if tool && matches!(&item.content, Content::Blocks(blocks) if blocks.is_empty()) {
                if !item.content_changed {
                    let reason = "empty content list: the empty string".to_owned();
                    self.change(1, Some(index), "empty_result", reason);
                    item.content_changed = true;
                }
                item.content = Content::EmptyText;
            }
            let empty = match (&item.content, item.role) {
                (Content::Absent, Role::Tool | Role::Function) => true,
                (Content::Blocks(blocks), Role::Tool | Role::Function) => blocks.is_empty(),
                (_, Role::Tool | Role::Function) => false,
                _ => is_empty(&item),
            };
            if empty {
                self.change(1, Some(index), "drop_empty", "empty message".to_owned());
                continue;
            }
            if self.anthropic() && matches!(item.role, Role::System | Role::Developer) {
                self.change(
                    1,
                    Some(index),
                    "lift_system",
                    "system message lifted into the system prompt".to_owned(),
                );
                self.system.push(content_out(&item.content));
                continue;
            }
            if !self.track_legacy(index, &mut item, &mut open_legacy) {
                continue;
            }
            items.push(item);
        }
        Ok(items)
    }

    /// Drop (and report) a user or assistant message with no tool calls whose
    /// content is only text, and junk text at that.
    fn drop_if_junk(&mut self, stage: u8, item: &Item) -> bool {
        if !matches!(item.role, Role::User | Role::Assistant) || !item.calls.is_empty() {
            return false;
        }
        let junk = gather::with_item_text(self.messages, item, |text| self.patterns.classify(text));
        let (action, reason) = match junk {
            Some(Junk::Placeholder) => ("drop_placeholder", "placeholder text"),
            Some(Junk::ErrorReply) => ("drop_error_reply", "error or cancel reply"),
            None => return false,
        };
        self.change(stage, Some(item.origin), action, reason.to_owned());
        true
    }

    /// Stage 3: a message that lost tool calls or results goes if nothing, or
    /// only junk text, is left. Returns whether it stays.
    fn keeps_after_stripping(&mut self, item: &Item, what: &str) -> bool {
        if is_empty(item) {
            self.change(
                3,
                Some(item.origin),
                "drop_empty",
                format!("empty after removing {what}"),
            );
            return false;
        }
        !self.drop_if_junk(3, item)
    }

    /// Legacy function calling (OpenAI): remember an assistant's
    /// `function_call`, and convert the function message that answers it (or
    /// drop one that answers nothing). Returns whether the item stays.
    fn track_legacy(
        &mut self,
        index: usize,
        item: &mut Item,
        open_legacy: &mut Option<(usize, IdHash)>,
    ) -> bool {
        match item.role {
            Role::Assistant => {
                *open_legacy = if item.legacy_call {
                    item.function_name.map(|name| (index, name))
                } else {
                    None
                };
                true
            }
            Role::Function => match open_legacy.take() {
                Some((assistant, name)) if item.function_name == Some(name) => {
                    self.change(
                        1,
                        Some(index),
                        "convert_function",
                        "legacy function result converted to a tool message".to_owned(),
                    );
                    item.role = Role::Tool;
                    item.answers = Some(self.ids.key(&legacy_call_id(assistant)));
                    item.converted_from_function = true;
                    item.legacy_of = Some(assistant);
                    true
                }
                _ => {
                    self.change(
                        1,
                        Some(index),
                        "drop_role",
                        "legacy function result without a function_call to answer".to_owned(),
                    );
                    false
                }
            },
            _ => true,
        }
    }

    /// Why the target API refuses this message's role, if it does.
    fn refused_role(&self, index: usize, item: &Item) -> Option<String> {
        let role_text = || {
            self.messages[index]
                .get("role")
                .and_then(|r| r.as_str().map(std::borrow::Cow::into_owned))
                .unwrap_or_default()
        };
        match (self.options.provider, item.role) {
            (_, Role::Unknown) => Some(format!("unknown role \"{}\"", role_text())),
            (Provider::Anthropic, Role::Tool | Role::Function) => Some(format!(
                "role \"{}\" is not accepted by anthropic",
                role_text()
            )),
            (Provider::OpenAi, Role::Function) if !self.options.convert_function => Some(
                "legacy role \"function\" (the convert_function option converts it)".to_owned(),
            ),
            _ => None,
        }
    }

    /// Remove blank text blocks (a kept tool result's blank text parts too),
    /// and (Anthropic) `tool_use` blocks outside assistant messages,
    /// `tool_result` blocks outside user messages and non-text blocks of
    /// system messages.
    fn drop_misplaced_blocks(&mut self, item: &mut Item) {
        let Content::Blocks(blocks) = &mut item.content else {
            return;
        };
        let anthropic = self.options.provider == Provider::Anthropic;
        let role = item.role;
        let messages = self.messages;
        let mut dropped: Vec<(usize, String)> = Vec::new();
        blocks.retain(|block| {
            let (message, j) = match block.src {
                BlockRef::Block { message, block } | BlockRef::TrimmedResult { message, block } => {
                    (message, block)
                }
                BlockRef::TextOf { .. } => return true,
            };
            let why = match block.kind {
                BlockKind::Text { blank: true } => format!("empty text block at content[{j}]"),
                BlockKind::ToolUse if anthropic && role != Role::Assistant => {
                    format!(
                        "tool_use block in a {} message at content[{j}]",
                        role.name()
                    )
                }
                BlockKind::ToolResult if anthropic && role != Role::User => {
                    format!(
                        "tool_result block in a {} message at content[{j}]",
                        role.name()
                    )
                }
                BlockKind::ServerUse | BlockKind::ServerResult
                    if anthropic && role != Role::Assistant =>
                {
                    let kind = gather::block_id_text(messages, block.src, "type");
                    format!("{kind} block in a {} message at content[{j}]", role.name())
                }
                // The system parameter takes text blocks only.
                BlockKind::Thinking | BlockKind::Other
                    if anthropic && matches!(role, Role::System | Role::Developer) =>
                {
                    format!(
                        "non-text block in a {} message at content[{j}]",
                        role.name()
                    )
                }
                _ => {
                    // Kept: a tool result loses its blank text parts.
                    if let BlockRef::TrimmedResult { .. } = block.src {
                        for k in gather::blank_parts(messages, message, j) {
                            let why = format!("empty text block at content[{j}].content[{k}]");
                            dropped.push((message, why));
                        }
                    }
                    return true;
                }
            };
            dropped.push((message, why));
            false
        });
        if !dropped.is_empty() {
            item.content_changed = true;
        }
        for (message, why) in dropped {
            self.change(1, Some(message), "drop_block", why);
        }
        // Before the junk check: the text left is what a second pass judges.
        if anthropic && role == Role::Assistant && self.drop_trailing_thinking(1, blocks) {
            item.content_changed = true;
        }
    }

    /// The API refuses an assistant message that ends with thinking (a reply
    /// cut off while thinking, or interleaved thinking before a removed
    /// call): those blocks go, last first. Thinking alone is left whole (the
    /// message is empty then, and goes). Returns whether any went.
    fn drop_trailing_thinking(&mut self, stage: u8, blocks: &mut Vec<Block>) -> bool {
        if blocks.iter().all(|b| b.kind == BlockKind::Thinking) {
            return false;
        }
        let mut dropped = false;
        while let Some(block) = blocks.pop_if(|b| b.kind == BlockKind::Thinking) {
            if let BlockRef::Block { message, block } = block.src {
                self.change(
                    stage,
                    Some(message),
                    "drop_block",
                    format!("thinking block left last at content[{block}]"),
                );
            }
            dropped = true;
        }
        dropped
    }

    /// `tool_calls: []` goes; tool calls outside assistant messages go; a
    /// legacy `function_call` is converted (OpenAI, when asked) or removed.
    fn settle_calls(&mut self, item: &mut Item) {
        let index = item.origin;
        if item.empty_tool_calls {
            self.change(1, Some(index), "drop_key", "empty tool_calls".to_owned());
            item.calls_changed = true;
        }
        if item.role != Role::Assistant && !item.calls.is_empty() {
            for call in std::mem::take(&mut item.calls) {
                let id = gather::call_id_text(self.messages, call.src);
                let reason = format!("tool call \"{id}\" in a {} message", item.role.name());
                self.change(1, Some(index), "drop_call", reason);
            }
            item.calls_changed = true;
        }
        if item.has_function_call {
            item.calls_changed = true; // the function_call key goes either way
            let convert =
                self.options.convert_function && !self.anthropic() && item.role == Role::Assistant;
            if convert {
                self.change(
                    1,
                    Some(index),
                    "convert_function",
                    "legacy function_call converted to tool_calls".to_owned(),
                );
                item.calls.push(Call {
                    src: CallRef::Legacy { message: index },
                    id: self.ids.key(&legacy_call_id(index)),
                });
                item.legacy_call = true;
            } else {
                let hint = if self.anthropic() || item.role != Role::Assistant {
                    ""
                } else {
                    " (the convert_function option converts it)"
                };
                self.change(
                    1,
                    Some(index),
                    "drop_call",
                    format!("legacy function_call removed{hint}"),
                );
            }
        }
    }

    /// Stages 2 and 4: merge consecutive messages of the same role.
    pub fn merge(&mut self, stage: u8, mut items: Vec<Item>) -> Vec<Item> {
        // In place: a merged item's parts move into the one before it.
        let provider = self.options.provider;
        items.dedup_by(|item, previous| {
            if !self.mergeable(previous, item) {
                return false;
            }
            self.change(
                stage,
                Some(item.origin),
                "merge",
                format!("merged into the previous {} message", item.role.name()),
            );
            merge_into(previous, item, provider);
            true
        });
        items
    }

    fn mergeable(&self, previous: &Item, item: &Item) -> bool {
        previous.role == item.role
            && matches!(
                item.role,
                Role::User | Role::Assistant | Role::System | Role::Developer
            )
            && (self.anthropic() || previous.name == item.name)
    }

    /// Stage 3: pair every tool call with exactly one result where the API
    /// wants it; drop the rest.
    pub fn stage3(&mut self, items: Vec<Item>) -> Vec<Item> {
        if self.anthropic() {
            self.pair_anthropic(items)
        } else {
            self.pair_openai(items)
        }
    }

    fn pair_openai(&mut self, items: Vec<Item>) -> Vec<Item> {
        let mut seen: HashSet<IdHash> = self.called_before.iter().copied().collect();
        let mut out = Vec::with_capacity(items.len());
        let mut slots: Vec<Option<Item>> = items.into_iter().map(Some).collect();
        let mut i = 0;
        while i < slots.len() {
            let role = slots[i].as_ref().map(|it| it.role);
            if role != Some(Role::Assistant) {
                let item = slots[i].take().expect("each slot is visited once");
                self.keep_or_drop_orphan(item, &mut out);
                i += 1;
                continue;
            }
            let end = (i + 1..slots.len())
                .find(|&k| {
                    slots[k]
                        .as_ref()
                        .is_some_and(|it| it.role == Role::Assistant)
                })
                .unwrap_or(slots.len());
            let mut assistant = slots[i].take().expect("each slot is visited once");
            // The tool results of the segment by the id they answer, in order.
            let mut results: FxHashMap<IdHash, VecDeque<usize>> = FxHashMap::default();
            for (k, slot) in slots.iter().enumerate().take(end).skip(i + 1) {
                if let Some(answers) = slot
                    .as_ref()
                    .filter(|it| it.role == Role::Tool)
                    .and_then(|it| it.answers)
                {
                    results.entry(answers).or_default().push_back(k);
                }
            }
            let first_other = (i + 1..end)
                .find(|&k| slots[k].as_ref().is_some_and(|it| it.role != Role::Tool))
                .unwrap_or(end);
            let mut claimed: Vec<usize> = Vec::new();
            let mut kept_calls = Vec::with_capacity(assistant.calls.len());
            let call_count = assistant.calls.len();
            for call in std::mem::take(&mut assistant.calls) {
                let id_text = || gather::call_id_text(self.messages, call.src);
                if seen.contains(&call.id) {
                    self.change(
                        3,
                        Some(assistant.origin),
                        "drop_duplicate_call",
                        format!("duplicate tool call id \"{}\"", id_text()),
                    );
                    assistant.calls_changed = true;
                    continue;
                }
                let result = results.get_mut(&call.id).and_then(VecDeque::pop_front);
                if let Some(k) = result {
                    claimed.push(k);
                    seen.insert(call.id);
                    kept_calls.push(call);
                } else {
                    self.change(
                        3,
                        Some(assistant.origin),
                        "drop_call",
                        format!("tool call \"{}\" has no result", id_text()),
                    );
                    assistant.calls_changed = true;
                }
            }
            let stripped = kept_calls.len() != call_count;
            assistant.calls = kept_calls;
            if !stripped || self.keeps_after_stripping(&assistant, "tool calls without results") {
                out.push(assistant);
            }
            claimed.sort_unstable();
            for &k in &claimed {
                let moved = first_other < k;
                let result = slots[k].take().expect("claimed once");
                if moved {
                    let id = match result.legacy_of {
                        Some(assistant) => legacy_call_id(assistant),
                        None => gather::answer_id_text(&self.messages[result.origin])
                            .unwrap_or_default(),
                    };
                    self.change(
                        3,
                        Some(result.origin),
                        "move_result",
                        format!("tool result for \"{id}\" moved to follow its call"),
                    );
                }
                out.push(result);
            }
            for slot in &mut slots[i + 1..end] {
                if let Some(item) = slot.take() {
                    self.keep_or_drop_orphan(item, &mut out);
                }
            }
            i = end;
        }
        out
    }

    /// Keep a non-assistant item, unless it is a tool result nobody claimed.
    fn keep_or_drop_orphan(&mut self, item: Item, out: &mut Vec<Item>) {
        if item.role == Role::Tool {
            let id = match item.legacy_of {
                Some(assistant) => Some(legacy_call_id(assistant)),
                None => gather::answer_id_text(&self.messages[item.origin]),
            };
            let reason = match id {
                Some(id) => format!("tool result for \"{id}\" has no matching call"),
                None => "tool result without tool_call_id".to_owned(),
            };
            self.change(3, Some(item.origin), "drop_result", reason);
        } else {
            out.push(item);
        }
    }

    fn pair_anthropic(&mut self, items: Vec<Item>) -> Vec<Item> {
        let mut seen: HashSet<IdHash> = self.called_before.iter().copied().collect();
        let mut out = Vec::with_capacity(items.len());
        let mut items = items.into_iter().peekable();
        while let Some(mut item) = items.next() {
            if item.role != Role::Assistant {
                // A user message not right after an assistant message: no result can be valid.
                if let Some(user) = self.settle_results(item, &HashSet::default()) {
                    out.push(user);
                }
                continue;
            }
            let next_is_user = items.peek().is_some_and(|next| next.role == Role::User);
            // A paused turn sent back: the history's last message may hold a
            // server tool use whose result the model has yet to give.
            let paused = items.peek().is_none();
            let available: HashSet<IdHash> = if next_is_user {
                result_ids(items.peek().expect("peeked"))
            } else {
                HashSet::default()
            };
            let mut claimed: HashSet<IdHash> = HashSet::default();
            let mut stripped = !item.calls.is_empty();
            // OpenAI-style tool_calls can have no result here: tool messages were dropped.
            for call in std::mem::take(&mut item.calls) {
                let id = gather::call_id_text(self.messages, call.src);
                self.change(
                    3,
                    Some(item.origin),
                    "drop_call",
                    format!("tool call \"{id}\" has no result"),
                );
                item.calls_changed = true;
            }
            if let Content::Blocks(blocks) = &mut item.content {
                let server_results = answered_after_use(blocks);
                let mut server_kept: HashSet<IdHash> = HashSet::default();
                let mut kept = Vec::with_capacity(blocks.len());
                for block in blocks.drain(..) {
                    let id_text = || gather::block_id_text(self.messages, block.src, "id");
                    if block.kind == BlockKind::ServerUse {
                        let keep = self.keep_server_use(
                            &block,
                            item.origin,
                            paused,
                            &server_results,
                            &mut seen,
                        );
                        if keep {
                            server_kept.insert(block.id);
                            kept.push(block);
                        } else {
                            item.content_changed = true;
                            stripped = true;
                        }
                        continue;
                    }
                    if block.kind != BlockKind::ToolUse {
                        kept.push(block);
                        continue;
                    }
                    if seen.contains(&block.id) {
                        self.changes.push(Change {
                            stage: 3,
                            index: Some(item.origin),
                            action: "drop_duplicate_call",
                            reason: format!("duplicate tool call id \"{}\"", id_text()),
                        });
                        item.content_changed = true;
                        stripped = true;
                    } else if available.contains(&block.id) {
                        seen.insert(block.id);
                        claimed.insert(block.id);
                        kept.push(block);
                    } else {
                        self.changes.push(Change {
                            stage: 3,
                            index: Some(item.origin),
                            action: "drop_call",
                            reason: format!("tool call \"{}\" has no result", id_text()),
                        });
                        item.content_changed = true;
                        stripped = true;
                    }
                }
                if self.settle_server_results(item.origin, &mut kept, &server_kept) {
                    item.content_changed = true;
                    stripped = true;
                }
                // Stage 1 left no thinking last; a removed call can.
                if stripped {
                    self.drop_trailing_thinking(3, &mut kept);
                }
                *blocks = kept;
            }
            if !stripped || self.keeps_after_stripping(&item, "tool calls without results") {
                out.push(item);
            }
            if next_is_user {
                let user = items.next().expect("peeked");
                if let Some(user) = self.settle_results(user, &claimed) {
                    out.push(user);
                }
            }
        }
        out
    }

    /// Whether a server tool use stays: its id not kept before, and its
    /// result in its message or the message `paused` (the history's last).
    /// Reports a removal.
    fn keep_server_use(
        &mut self,
        block: &Block,
        origin: usize,
        paused: bool,
        results: &HashSet<IdHash>,
        seen: &mut HashSet<IdHash>,
    ) -> bool {
        let id = || gather::block_id_text(self.messages, block.src, "id");
        if seen.contains(&block.id) {
            let reason = format!("duplicate tool call id \"{}\"", id());
            self.change(3, Some(origin), "drop_duplicate_call", reason);
            false
        } else if paused || results.contains(&block.id) {
            seen.insert(block.id);
            true
        } else {
            let reason = format!("server tool use \"{}\" has no result", id());
            self.change(3, Some(origin), "drop_call", reason);
            false
        }
    }

    /// Keep in an assistant message's `blocks` one server tool result per
    /// server tool use it kept (`kept_uses`); returns whether any went.
    fn settle_server_results(
        &mut self,
        origin: usize,
        blocks: &mut Vec<Block>,
        kept_uses: &HashSet<IdHash>,
    ) -> bool {
        let mut answered: HashSet<IdHash> = HashSet::default();
        // The uses met so far: a result must come after its use (the API
        // refuses one before it).
        let mut used: HashSet<IdHash> = HashSet::default();
        let before = blocks.len();
        let messages = self.messages;
        let mut dropped: Vec<String> = Vec::new();
        blocks.retain(|block| {
            if block.kind == BlockKind::ServerUse {
                used.insert(block.id);
            }
            if block.kind != BlockKind::ServerResult
                || (used.contains(&block.id)
                    && kept_uses.contains(&block.id)
                    && answered.insert(block.id))
            {
                return true;
            }
            let id = gather::block_id_text(messages, block.src, "tool_use_id");
            dropped.push(if answered.contains(&block.id) {
                format!("duplicate server tool result for \"{id}\"")
            } else if kept_uses.contains(&block.id) {
                format!("server tool result for \"{id}\" comes before its server tool use")
            } else {
                format!("server tool result for \"{id}\" has no matching server tool use")
            });
            false
        });
        for reason in dropped {
            self.change(3, Some(origin), "drop_result", reason);
        }
        blocks.len() != before
    }

    /// Keep in a user message only the tool results of `claimed` (the first
    /// one per id), placed first; drop the message if nothing is left.
    fn settle_results(&mut self, mut user: Item, claimed: &HashSet<IdHash>) -> Option<Item> {
        let mut stripped = false;
        if let Content::Blocks(blocks) = &mut user.content {
            let mut answered: HashSet<IdHash> = HashSet::default();
            let mut results = Vec::new();
            let mut others = Vec::new();
            // A kept result after some other block: the results must move up.
            let mut reordered = false;
            for block in blocks.drain(..) {
                if block.kind != BlockKind::ToolResult {
                    others.push(block);
                } else if claimed.contains(&block.id) && answered.insert(block.id) {
                    reordered |= !others.is_empty();
                    results.push(block);
                } else {
                    let id = gather::block_id_text(self.messages, block.src, "tool_use_id");
                    let reason = if answered.contains(&block.id) {
                        format!("duplicate tool result for \"{id}\"")
                    } else {
                        format!("tool result for \"{id}\" has no matching call")
                    };
                    self.changes.push(Change {
                        stage: 3,
                        index: Some(user.origin),
                        action: "drop_result",
                        reason,
                    });
                    user.content_changed = true;
                    stripped = true;
                }
            }
            if reordered {
                self.changes.push(Change {
                    stage: 3,
                    index: Some(user.origin),
                    action: "reorder_blocks",
                    reason: "tool results moved to the start of the message".to_owned(),
                });
                user.content_changed = true;
            }
            results.extend(others);
            *blocks = results;
        }
        (!stripped || self.keeps_after_stripping(&user, "tool results without calls"))
            .then_some(user)
    }
}

fn result_ids(item: &Item) -> HashSet<IdHash> {
    match &item.content {
        Content::Blocks(blocks) => ids_of(blocks, BlockKind::ToolResult),
        _ => HashSet::default(),
    }
}

/// The server tool uses of `blocks` with a result after them (one before
/// its use answers nothing: the API refuses it).
fn answered_after_use(blocks: &[Block]) -> HashSet<IdHash> {
    let mut uses: HashSet<IdHash> = HashSet::default();
    let mut answered: HashSet<IdHash> = HashSet::default();
    for block in blocks {
        match block.kind {
            BlockKind::ServerUse => {
                uses.insert(block.id);
            }
            BlockKind::ServerResult if uses.contains(&block.id) => {
                answered.insert(block.id);
            }
            _ => {}
        }
    }
    answered
}

/// The ids of the blocks of one kind.
fn ids_of(blocks: &[Block], kind: BlockKind) -> HashSet<IdHash> {
    blocks
        .iter()
        .filter(|b| b.kind == kind)
        .map(|b| b.id)
        .collect()
}

/// Whether a message has nothing the API would take as content: no text
/// that is not blank, no block other than blank text or thinking, no
/// refusal, no tool call.
pub(crate) fn is_empty(item: &Item) -> bool {
    let substance = match &item.content {
        Content::Absent | Content::EmptyText => false,
        Content::Text(_) => !item.blank_text,
        Content::Texts(_) => true,
        Content::Blocks(blocks) => blocks.iter().any(|b| {
            !matches!(
                b.kind,
                BlockKind::Text { blank: true } | BlockKind::Thinking
            )
        }),
    };
    !substance && item.calls.is_empty()
}

/// Append `item` to `previous` (same role).
fn merge_into(previous: &mut Item, item: &mut Item, provider: Provider) {
    // A blank string content (kept only for the tool calls beside it) adds
    // nothing to a merge; absent content takes the other side as it is.
    if previous.blank_text {
        previous.content = Content::Absent;
        previous.blank_text = false;
    }
    if item.blank_text {
        item.content = Content::Absent;
    }
    previous.blank_text = false;
    previous.content = match (
        std::mem::replace(&mut previous.content, Content::Absent),
        std::mem::replace(&mut item.content, Content::Absent),
    ) {
        (
            a @ (Content::Text(_) | Content::Texts(_)),
            b @ (Content::Text(_) | Content::Texts(_)),
        ) => {
            let mut sources = text_sources(a);
            sources.extend(text_sources(b));
            Content::Texts(sources)
        }
        (Content::Absent, only) | (only, Content::Absent) => only,
        (a, b) => {
            let mut blocks = into_blocks(a);
            blocks.extend(into_blocks(b));
            if provider == Provider::Anthropic {
                match previous.role {
                    // Stable: the tool results lead.
                    Role::User => blocks.sort_by_key(|b| b.kind != BlockKind::ToolResult),
                    Role::Assistant => thinking_first(&mut blocks),
                    _ => {}
                }
            }
            Content::Blocks(blocks)
        }
    };
    previous.content_changed = true;
    if !item.calls.is_empty() || item.calls_changed {
        previous.calls.append(&mut item.calls);
        previous.calls_changed = true;
    }
}

/// A merged assistant message must start with thinking if it holds any. Its
/// blocks keep their order (thinking stays right before the tool calls it
/// led to); only blocks before the first thinking run move to just after it.
fn thinking_first(blocks: &mut [Block]) {
    let Some(first) = blocks.iter().position(|b| b.kind == BlockKind::Thinking) else {
        return;
    };
    let run = blocks[first..]
        .iter()
        .take_while(|b| b.kind == BlockKind::Thinking)
        .count();
    blocks[..first + run].rotate_left(first);
}

/// The messages whose string contents a text content joins.
fn text_sources(content: Content) -> Vec<usize> {
    match content {
        Content::Text(message) => vec![message],
        Content::Texts(messages) => messages,
        Content::Absent | Content::EmptyText | Content::Blocks(_) => Vec::new(),
    }
}

fn into_blocks(content: Content) -> Vec<Block> {
    match content {
        Content::Absent | Content::EmptyText => Vec::new(),
        Content::Text(message) => vec![Block {
            src: BlockRef::TextOf { message },
            kind: BlockKind::Text { blank: false },
            id: 0,
        }],
        Content::Texts(messages) => messages
            .into_iter()
            .map(|message| Block {
                src: BlockRef::TextOf { message },
                kind: BlockKind::Text { blank: false },
                id: 0,
            })
            .collect(),
        Content::Blocks(blocks) => blocks,
    }
}

/// The output form of a content.
pub(crate) fn content_out(content: &Content) -> OutContent {
    match content {
        Content::Absent => OutContent::Null,
        Content::EmptyText => OutContent::Literal(String::new()),
        Content::Text(message) => OutContent::Texts(vec![*message]),
        Content::Texts(messages) => OutContent::Texts(messages.clone()),
        Content::Blocks(blocks) => OutContent::Blocks(blocks.iter().map(|b| b.src).collect()),
    }
}

/// The output form of calls.
pub(crate) fn calls_out(calls: &[Call]) -> Vec<CallRef> {
    calls.iter().map(|c| c.src).collect()
}
