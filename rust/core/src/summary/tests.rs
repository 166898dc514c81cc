use super::*;

fn count(text: &str, limit: usize) -> usize {
    // One token a word: enough for the bound's logic here.
    text.split_whitespace().count().min(limit + 1)
}

const GOOD: &str = concat!(
    "<analysis>notes</analysis>\n<summary>\nConstraints:\n- retry at most 3 times\n",
    "Decisions:\n- use call_1 in src/retry.go\nCurrent state:\n- green\n",
    "Next steps:\n- ship\n</summary>",
);

#[test]
fn a_good_reply_keeps_its_summary_only() {
    let verdict = check_reply(GOOD, "call_1 src/retry.go", 100, count);
    let Verdict::Kept { body, tokens } = verdict else {
        panic!("{verdict:?}")
    };
    assert!(body.starts_with("Constraints:") && body.ends_with("- ship"));
    assert_eq!(tokens, count(body, 100));
}

#[test]
fn each_failure_has_its_reason() {
    let cases = [
        ("   ", "empty"),
        ("<!DOCTYPE html><html>", "HTML"),
        ("Error: rate limited", "error message"),
        ("I'm sorry, I can't", "refusal"),
        ("no tags", "no <summary>"),
        (
            "<summary>a</summary><summary>b</summary>",
            "expected one each",
        ),
        ("<summary>Constraints:", "not closed"),
        ("</summary> x <summary>", "comes before"),
        ("<summary>x</summary> trailing", "text after"),
        ("<summary>  </summary>", "is empty"),
    ];
    for (reply, why) in cases {
        match check_reply(reply, "", 100, count) {
            Verdict::Rejected(reason) => assert!(reason.contains(why), "{reply:?}: {reason}"),
            kept @ Verdict::Kept { .. } => panic!("{reply:?} was kept: {kept:?}"),
        }
    }
}

#[test]
fn names_outside_the_covered_text_are_refused() {
    let Verdict::Rejected(reason) = check_reply(GOOD, "call_10 src/retry.go", 100, count) else {
        panic!("kept")
    };
    assert!(reason.contains("call_1"), "{reason}");
    let unnamed_file = check_reply(GOOD, "call_1", 100, count);
    assert!(matches!(unnamed_file, Verdict::Rejected(r) if r.contains("src/retry.go")));
    let over = check_reply(GOOD, "call_1 src/retry.go", 5, count);
    assert!(matches!(over, Verdict::Rejected(r) if r.contains("bound")));
}

#[test]
fn names_and_occurrence() {
    let (ids, files) =
        named("see (services/x.go) and call_22_5; toolu_1. https://a.b/c.py I/O 3/4 a.py.");
    assert_eq!(ids, ["call_22_5", "toolu_1"]);
    assert_eq!(files, ["services/x.go", "a.py"]);
    assert!(occurs("A-8812", "订单A-8812已退款"));
    assert!(!occurs("3", "13 call_abc123"));
    assert!(occurs("3", "at most 3 times"));
}

#[test]
fn sections_in_order_once_each() {
    assert_eq!(
        check_sections("Constraints:\n- a\nDecisions:\n- b\nCurrent state:\n- c\nNext steps:\n- d"),
        None
    );
    let swapped = "Decisions:\n- b\nConstraints:\n- a\nCurrent state:\n- c\nNext steps:\n- d";
    assert!(check_sections(swapped).unwrap().contains("out of order"));
    let empty = "Constraints:\nDecisions:\n- b\nCurrent state:\n- c\nNext steps:\n- d";
    assert!(check_sections(empty).unwrap().contains("empty"));
}
