use super::*;
use crate::json::Json;

fn s(text: &str) -> Json<'_> {
    Json::String(text.into())
}

fn obj<'a>(entries: Vec<(&'a str, Json<'a>)>) -> Json<'a> {
    Json::Object(entries.into_iter().map(|(k, v)| (s(k), v)).collect())
}

fn msg<'a>(role: &'a str, content: Json<'a>) -> Json<'a> {
    obj(vec![("role", s(role)), ("content", content)])
}

fn blocks(items: Vec<Json<'_>>) -> Json<'_> {
    Json::Array(items)
}

fn anthropic() -> Sanitizer {
    Sanitizer::with_defaults(Options::new(Provider::Anthropic)).unwrap()
}

fn openai() -> Sanitizer {
    Sanitizer::with_defaults(Options::new(Provider::OpenAi)).unwrap()
}

/// The classic broken history: a placeholder, a legacy tool message, an orphaned call
/// and a cancel reply around one good call/result pair.
#[test]
fn seed_example_leaves_user_call_result() {
    let history = [
        msg("user", s("写个排序函数")),
        msg("assistant", s("[tool_call: quicksort]")),
        msg("tool", s("legacy tool message")),
        msg(
            "assistant",
            blocks(vec![
                obj(vec![
                    ("type", s("tool_use")),
                    ("id", s("call_1")),
                    ("name", s("search")),
                    ("input", obj(vec![])),
                ]),
                obj(vec![
                    ("type", s("tool_use")),
                    ("id", s("call_2")),
                    ("name", s("calc")),
                    ("input", obj(vec![])),
                ]),
            ]),
        ),
        msg(
            "user",
            blocks(vec![obj(vec![
                ("type", s("tool_result")),
                ("tool_use_id", s("call_1")),
                ("content", s("结果...")),
            ])]),
        ),
        msg("assistant", s("The request was cancelled...")),
    ];
    let refs: Vec<&Json> = history.iter().collect();
    let plan = anthropic().sanitize(&refs).unwrap();
    assert_eq!(
        plan.messages,
        vec![
            OutMessage::Original(0),
            OutMessage::Built(BuiltMessage {
                base: Some(3),
                role: None,
                content: Some(OutContent::Blocks(vec![BlockRef::Block {
                    message: 3,
                    block: 0
                }])),
                tool_calls: None,
                tool_call_id: None,
                remove: vec![],
            }),
            OutMessage::Original(4),
        ]
    );
    let actions: Vec<&str> = plan.changes.iter().map(|c| c.action).collect();
    assert_eq!(
        actions,
        [
            "drop_placeholder",
            "drop_role",
            "drop_error_reply",
            "drop_call"
        ]
    );
    assert!(plan.system.is_empty());
}

#[test]
fn valid_history_is_returned_untouched() {
    let history = [
        msg("system", s("Be brief.")),
        msg("user", s("hi")),
        msg("assistant", s("hello")),
        msg("user", s("bye")),
    ];
    let refs: Vec<&Json> = history.iter().collect();
    let plan = openai().sanitize(&refs).unwrap();
    assert!(plan.is_unchanged());
    assert_eq!(
        plan.messages,
        (0..4).map(OutMessage::Original).collect::<Vec<_>>()
    );
}

#[test]
fn consecutive_users_merge_and_anthropic_system_is_lifted() {
    let history = [
        msg("system", s("Be brief.")),
        msg("user", s("a")),
        msg("user", s("b")),
    ];
    let refs: Vec<&Json> = history.iter().collect();
    let plan = anthropic().sanitize(&refs).unwrap();
    assert_eq!(plan.system, vec![OutContent::Texts(vec![0])]);
    match &plan.messages[..] {
        [OutMessage::Built(built)] => {
            assert_eq!(built.content, Some(OutContent::Texts(vec![1, 2])));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_messages_raise_or_drop() {
    let history = [msg("user", s("ok")), obj(vec![("content", s("no role"))])];
    let refs: Vec<&Json> = history.iter().collect();
    let error = openai().sanitize(&refs).unwrap_err();
    assert_eq!(
        error.to_string(),
        "messages[1].role: required field is missing"
    );
    let mut options = Options::new(Provider::OpenAi);
    options.on_invalid = OnInvalid::Drop;
    let plan = Sanitizer::with_defaults(options)
        .unwrap()
        .sanitize(&refs)
        .unwrap();
    assert_eq!(plan.messages, vec![OutMessage::Original(0)]);
    assert_eq!(plan.changes[0].action, "drop_invalid");
}

/// A tail run told which calls the earlier part kept drops a call reusing
/// one of their ids, as the whole funnel does, and its result with it.
#[test]
fn a_tail_after_kept_calls_drops_their_reused_ids() {
    let call = |id: &'static str| {
        obj(vec![
            ("role", s("assistant")),
            ("content", Json::Null),
            (
                "tool_calls",
                blocks(vec![obj(vec![
                    ("id", s(id)),
                    ("type", s("function")),
                    (
                        "function",
                        obj(vec![("name", s("f")), ("arguments", s("{}"))]),
                    ),
                ])]),
            ),
        ])
    };
    let result = |id: &'static str| {
        obj(vec![
            ("role", s("tool")),
            ("tool_call_id", s(id)),
            ("content", s("done")),
        ])
    };
    let tail = [msg("user", s("again")), call("c1"), result("c1")];
    let tail_refs: Vec<&Json> = tail.iter().collect();
    let alone = openai().sanitize(&tail_refs).unwrap();
    assert!(alone.changes.is_empty());
    let after = openai()
        .sanitize_after(&tail_refs, &["c1".to_owned()])
        .unwrap();
    let actions: Vec<&str> = after.changes.iter().map(|c| c.action).collect();
    assert!(actions.contains(&"drop_duplicate_call"), "{actions:?}");
    assert!(actions.contains(&"drop_result"), "{actions:?}");
    let mut whole = vec![msg("user", s("start")), call("c1"), result("c1")];
    whole.extend(tail.iter().cloned());
    let whole_refs: Vec<&Json> = whole.iter().collect();
    let whole = openai().sanitize(&whole_refs).unwrap();
    let shifted: Vec<(Option<usize>, &str)> = whole
        .changes
        .iter()
        .map(|c| (c.index.map(|i| i - 3), c.action))
        .collect();
    let tail_changes: Vec<(Option<usize>, &str)> =
        after.changes.iter().map(|c| (c.index, c.action)).collect();
    assert_eq!(shifted, tail_changes);
}

fn block<'a>(kind: &'a str, entries: Vec<(&'a str, Json<'a>)>) -> Json<'a> {
    let mut all = vec![("type", s(kind))];
    all.extend(entries);
    obj(all)
}

/// Anthropic refuses an assistant message whose last block is thinking: the
/// trailing thinking goes (reported last first), the blocks before it are
/// kept as they are; a message of thinking alone goes whole.
#[test]
fn thinking_never_ends_an_assistant_message() {
    let thinking = |text: &'static str| {
        block(
            "thinking",
            vec![("thinking", s(text)), ("signature", s("sig"))],
        )
    };
    let history = [
        msg("user", s("go")),
        msg(
            "assistant",
            blocks(vec![
                thinking("plan"),
                block("text", vec![("text", s("Here."))]),
                thinking("cut"),
                block("redacted_thinking", vec![("data", s("opaque"))]),
            ]),
        ),
        msg("user", s("and?")),
        msg("assistant", blocks(vec![thinking("only")])),
    ];
    let refs: Vec<&Json> = history.iter().collect();
    let plan = anthropic().sanitize(&refs).unwrap();
    let kept = |b| BlockRef::Block {
        message: 1,
        block: b,
    };
    assert_eq!(
        plan.messages,
        vec![
            OutMessage::Original(0),
            OutMessage::Built(BuiltMessage {
                base: Some(1),
                role: None,
                content: Some(OutContent::Blocks(vec![kept(0), kept(1)])),
                tool_calls: None,
                tool_call_id: None,
                remove: vec![],
            }),
            OutMessage::Original(2),
        ]
    );
    let changes: Vec<(Option<usize>, &str, &str)> = plan
        .changes
        .iter()
        .map(|c| (c.index, c.action, c.reason.as_str()))
        .collect();
    assert_eq!(
        changes,
        [
            (
                Some(1),
                "drop_block",
                "thinking block left last at content[3]"
            ),
            (
                Some(1),
                "drop_block",
                "thinking block left last at content[2]"
            ),
            (Some(3), "drop_empty", "empty message"),
        ]
    );
    // OpenAI has no thinking blocks: they are another format's, left alone.
    assert!(openai().sanitize(&refs[..3]).unwrap().is_unchanged());
}

/// A tool result's blank text parts go, as the message's own do: the plan
/// names the result to copy without them (Anthropic), or gives a tool
/// message left with none the empty string (OpenAI), its call kept.
#[test]
fn blank_text_parts_of_tool_results_go() {
    let text = |t: &'static str| block("text", vec![("text", s(t))]);
    let result = |id: &'static str, parts: Vec<Json<'static>>| {
        block(
            "tool_result",
            vec![("tool_use_id", s(id)), ("content", blocks(parts))],
        )
    };
    let use_ = |id: &'static str| {
        block(
            "tool_use",
            vec![("id", s(id)), ("name", s("f")), ("input", obj(vec![]))],
        )
    };
    let history = [
        msg("user", s("go")),
        msg("assistant", blocks(vec![use_("a"), use_("b")])),
        msg(
            "user",
            blocks(vec![
                result("a", vec![text("out"), text(" \n")]),
                result("b", vec![text("fine")]),
            ]),
        ),
    ];
    let refs: Vec<&Json> = history.iter().collect();
    let plan = anthropic().sanitize(&refs).unwrap();
    assert_eq!(
        plan.messages[..2],
        [OutMessage::Original(0), OutMessage::Original(1)]
    );
    let OutMessage::Built(built) = &plan.messages[2] else {
        panic!("{:?}", plan.messages[2]);
    };
    assert_eq!(
        built.content,
        Some(OutContent::Blocks(vec![
            BlockRef::TrimmedResult {
                message: 2,
                block: 0
            },
            BlockRef::Block {
                message: 2,
                block: 1
            },
        ]))
    );
    let reasons: Vec<&str> = plan.changes.iter().map(|c| c.reason.as_str()).collect();
    assert_eq!(reasons, ["empty text block at content[0].content[1]"]);

    let call = obj(vec![
        ("id", s("c1")),
        ("type", s("function")),
        (
            "function",
            obj(vec![("name", s("f")), ("arguments", s("{}"))]),
        ),
    ]);
    let history = [
        msg("user", s("go")),
        obj(vec![
            ("role", s("assistant")),
            ("content", Json::Null),
            ("tool_calls", blocks(vec![call])),
        ]),
        obj(vec![
            ("role", s("tool")),
            ("tool_call_id", s("c1")),
            ("content", blocks(vec![text("\u{3000}")])),
        ]),
    ];
    let refs: Vec<&Json> = history.iter().collect();
    let plan = openai().sanitize(&refs).unwrap();
    assert_eq!(
        plan.messages[2],
        OutMessage::Built(BuiltMessage {
            base: Some(2),
            role: None,
            content: Some(OutContent::Literal(String::new())),
            tool_calls: None,
            tool_call_id: None,
            remove: vec![],
        })
    );
    let actions: Vec<&str> = plan.changes.iter().map(|c| c.action).collect();
    assert_eq!(actions, ["drop_block"]);
}

fn server_use(id: &str) -> Json<'_> {
    obj(vec![
        ("type", s("server_tool_use")),
        ("id", s(id)),
        ("name", s("web_search")),
        ("input", obj(vec![])),
    ])
}

fn server_result(id: &str) -> Json<'_> {
    obj(vec![
        ("type", s("web_search_tool_result")),
        ("tool_use_id", s(id)),
        ("content", blocks(vec![])),
    ])
}

/// A server tool use pairs with its result in its own message; unanswered,
/// it stays only in the history's last message (a paused turn sent back).
#[test]
fn server_tool_uses_pair_in_their_message_or_end_a_paused_turn() {
    let text = |t| obj(vec![("type", s("text")), ("text", s(t))]);
    let paused = msg(
        "assistant",
        blocks(vec![text("Searching."), server_use("srvtoolu_1")]),
    );
    let history = [msg("user", s("Weather?")), paused.clone()];
    let refs: Vec<&Json> = history.iter().collect();
    assert!(anthropic().sanitize(&refs).unwrap().is_unchanged());

    let history = [
        msg("user", s("Weather?")),
        paused,
        msg("user", s("Lyon?")),
        msg(
            "assistant",
            blocks(vec![server_result("srvtoolu_2"), text("Sunny.")]),
        ),
    ];
    let refs: Vec<&Json> = history.iter().collect();
    let plan = anthropic().sanitize(&refs).unwrap();
    let actions: Vec<_> = plan
        .changes
        .iter()
        .map(|c| (c.stage, c.index, c.action))
        .collect();
    assert_eq!(
        actions,
        [(3, Some(1), "drop_call"), (3, Some(3), "drop_result")]
    );
    let Some(OutMessage::Built(built)) = plan.messages.get(1) else {
        panic!("message 1 is rebuilt");
    };
    assert_eq!(
        built.content,
        Some(OutContent::Blocks(vec![BlockRef::Block {
            message: 1,
            block: 0
        }]))
    );
}
