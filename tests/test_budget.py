"""Budgets: a model's window split into what a request may use, and the ratio of
provider tokens per counted token that ``Budget.observe`` learns from the usage
the APIs report."""

from __future__ import annotations

import math

import numpy as np
import pytest
from anthropic.types import Usage as AnthropicUsage
from openai.types import CompletionUsage
from openai.types.completion_usage import PromptTokensDetails
from openai.types.responses import ResponseUsage

from context_core import (
    Budget,
    BudgetTooSmallError,
    BudgetWarning,
    ContextCoreError,
    InvalidInputError,
    InvalidTypeError,
    Tokenizer,
    UnknownModelError,
)
from context_core.budget import RATIO_RANGE

TOK = Tokenizer()


def claude() -> Budget:
    budget = Budget.for_model("claude-sonnet-4-5")  # 200K window, soft limit 140K, ratio 1.2
    assert budget.estimated
    assert budget.ratio == pytest.approx(1.2)
    assert budget.messages() == 110_000  # (140,000 - 8,000) / 1.2
    return budget


def test_budget_for_models_and_reserves():
    budget = Budget.for_model("gpt-4o-2024-08-06")
    assert budget.window == 128_000
    assert not budget.estimated
    assert budget.soft_limit == 89_600
    assert budget.messages() == 89_600 - 8_000
    assert budget.history() == 89_600 - 8_000 - 5_000 - 3_000
    tools = [
        {
            "name": "search",
            "description": "Search the web.",
            "parameters": {"properties": {"q": {"type": "string"}}},
        }
    ]
    assert budget.messages(system_tokens=1000, tools=tools) == 89_600 - 1000 - TOK.count_tools(tools)
    assert Budget.for_model("gpt-4.1-mini").window == 1_047_576
    # A longer prefix than o1's and gpt-4's: their own windows (a review found 200K and 8,192).
    assert Budget.for_model("o1-preview-2024-09-12").window == 128_000
    assert Budget.for_model("gpt-4.5-preview").window == 128_000
    assert Budget.for_model("my-model", window=10_000).window == 10_000
    with pytest.raises(UnknownModelError):
        Budget.for_model("llama-3")


def test_estimated_budgets_learn_the_ratio():
    budget = claude()
    start = budget.messages()
    for _ in range(30):
        budget.observe(counted=10_000, reported=11_000)
    assert budget.ratio == pytest.approx(1.1)
    assert budget.observations == 30
    assert budget.messages() > start
    with pytest.raises(InvalidTypeError):
        budget.observe(1.5, 2)


# -- the usage as the SDKs report it -------------------------------------------------------------

# The numbers: a prompt of 40,000 tokens by our count, most of it a cached prefix.
# Anthropic's input_tokens is only the uncached tail (1,000); the 51,000 read from the cache
# are reported apart. Five turns of input_tokens alone learned 0.025, and messages() became
# 132,000 / 0.025 = 5,280,000 for a 200K window.
CACHED_TURN = {
    "input_tokens": 1_000,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 51_000,
    "output_tokens": 400,
}


def test_five_cached_anthropic_turns_learn_the_real_ratio():
    budget = claude()
    for _ in range(5):
        budget.observe(40_000, CACHED_TURN)
    assert budget.ratio == pytest.approx(1.3)  # 52,000 / 40,000
    assert budget.messages() == math.floor(132_000 / 1.3)
    assert budget.observations == 5


def test_anthropic_usage_objects_and_cache_writes_count():
    budget = claude()
    # The first turn writes the cache, the next ones read it; the SDK leaves absent fields None.
    for usage in (
        AnthropicUsage(input_tokens=1_000, cache_creation_input_tokens=51_000, output_tokens=9),
        AnthropicUsage(input_tokens=1_000, cache_read_input_tokens=51_000, output_tokens=9),
        AnthropicUsage(input_tokens=52_000, output_tokens=9),  # caching off
    ):
        budget.observe(40_000, usage)
    assert budget.ratio == pytest.approx(1.3)


def test_openai_prompt_tokens_already_hold_the_cached_ones():
    chat = CompletionUsage(
        prompt_tokens=12_000,
        completion_tokens=10,
        total_tokens=12_010,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=11_000),
    )
    # Built without validation: the detail fields it requires differ between SDK versions.
    responses = ResponseUsage.model_construct(
        input_tokens=12_000,
        input_tokens_details={"cached_tokens": 11_000},
        output_tokens=10,
        output_tokens_details={"reasoning_tokens": 0},
        total_tokens=12_010,
    )
    budget = Budget.for_model("gpt-4o")
    budget.observe(10_000, chat)
    budget.observe(10_000, responses)
    budget.observe(10_000, {"prompt_tokens": 12_000, "prompt_tokens_details": {"cached_tokens": 11_000}})
    assert budget.ratio == pytest.approx(1.2)


# -- samples outside the plausible range --------------------------------------------------------


def test_input_tokens_alone_is_rejected_not_learned():
    budget = claude()
    for _ in range(5):
        with pytest.warns(BudgetWarning, match=r"0\.025 .*outside \[0\.5, 4\].*cache"):
            assert budget.observe(40_000, 1_000) == pytest.approx(1.2)
    assert budget.ratio == pytest.approx(1.2)
    assert budget.messages() == 110_000  # not 5,280,000
    assert (budget.observations, budget.rejected) == (0, 5)


def test_a_high_outlier_cannot_empty_the_budget():
    budget = claude()
    for _ in range(5):
        with pytest.warns(
            BudgetWarning, match=r"^usage sample rejected: 40000 reported / 1000 counted = 40 t"
        ):
            budget.observe(1_000, 40_000)
    assert budget.messages() == 110_000
    assert budget.history() == 110_000 - math.ceil(8_000 / 1.2)


def test_the_range_bounds_are_kept():
    low, high = RATIO_RANGE
    assert (low, high) == (0.5, 4.0)
    budget = claude()
    budget.observe(1_000, 500)  # exactly the bounds are plausible
    budget.observe(1_000, 4_000)
    assert budget.rejected == 0
    with pytest.warns(BudgetWarning):
        budget.observe(1_000, 4_001)
    with pytest.warns(BudgetWarning):
        budget.observe(1_000, 499)
    assert (budget.observations, budget.rejected) == (2, 2)


def test_one_outlier_within_range_does_not_move_the_ratio():
    budget = claude()
    budget.observe(10_000, 39_000)  # 3.9 alone: the safety factor outvotes it
    assert budget.ratio == pytest.approx(1.2)
    budget.observe(10_000, 11_000)
    assert budget.ratio == pytest.approx(1.2)  # the median of 1.1, 1.2 and 3.9
    budget.observe(10_000, 11_000)
    assert budget.ratio == pytest.approx(1.1)
    budget.observe(10_000, 5_000)  # a low outlier: 0.5, 1.1, 1.1, 3.9
    assert budget.ratio == pytest.approx(1.1)

    fresh = claude()
    fresh.observe(10_000, 5_000)  # a low first sample cannot widen the budget on its own
    assert fresh.messages() == 110_000


def test_the_ratio_follows_drift_over_the_last_nine_samples():
    budget = claude()
    for _ in range(9):
        budget.observe(10_000, 11_000)
    for _ in range(4):
        budget.observe(10_000, 14_000)
    assert budget.ratio == pytest.approx(1.1)  # five of the last nine still say 1.1
    budget.observe(10_000, 14_000)
    assert budget.ratio == pytest.approx(1.4)


# -- never beyond the window ----------------------------------------------------------------


def test_messages_never_exceed_the_window():
    budget = claude()
    for _ in range(3):
        budget.observe(10_000, 5_000)  # 0.5: the low bound, learned
    assert budget.ratio == pytest.approx(0.5)
    # 132,000 / 0.5 = 264,000 of our tokens would fit the window only if the
    # learned ratio is right: never more of our tokens than the window holds.
    assert budget.messages() == 200_000 - 8_000
    assert budget.messages(system_tokens=10_000) == 200_000 - 10_000
    assert budget.history() <= budget.messages()
    # (7,000 - 1,250) / 0.5 = 11,500 would overrun the window: capped at the window less the reserve
    assert Budget(window=10_000, safety_factor=0.5).messages() == 10_000 - 1_250
    small = Budget(window=100_000, soft_ratio=1.0, system_reserve=0, safety_factor=0.5)
    assert small.messages() == 100_000


def test_a_measured_system_prompt_is_in_counted_tokens():
    # The soft limit is in the provider's tokens; a system prompt we counted is in ours.
    budget = Budget(window=200_000, safety_factor=1.25)
    assert budget.messages(system_tokens=20_000) == 112_000 - 20_000  # 140,000 / 1.25 - 20,000
    assert budget.messages() == 105_600  # (140,000 - 8,000) / 1.25: a reserve is a share of the window


def test_reserves_scale_with_small_windows_and_a_budget_without_room_is_refused():
    gpt4 = Budget.for_model("gpt-4")  # 8,192 tokens: fixed 8K/5K/3K reserves would leave nothing
    assert (gpt4.system_reserve, gpt4.pinned_reserve, gpt4.input_reserve) == (1_024, 512, 512)
    assert gpt4.messages() == int(8_192 * 0.7) - 1_024
    assert gpt4.history() == gpt4.messages() - 1_024
    turbo = Budget.for_model("gpt-3.5-turbo")
    assert turbo.history() == int(16_385 * 0.7) - 2_048 - 1_024 - 1_024
    big = Budget.for_model("gpt-4o")  # large windows keep the fixed reserves
    assert (big.system_reserve, big.pinned_reserve, big.input_reserve) == (8_000, 5_000, 3_000)
    assert Budget.for_model("gpt-4", system_reserve=2_000).system_reserve == 2_000  # given wins
    with pytest.raises(BudgetTooSmallError, match="no room for history") as caught:
        Budget.for_model("gpt-4", system_reserve=8_000)
    error = caught.value
    assert isinstance(error, InvalidInputError)
    assert isinstance(error, ValueError)
    assert (error.window, error.soft_limit, error.system_reserve) == (8_192, 5_734, 8_000)
    assert (error.pinned_reserve, error.input_reserve, error.ratio) == (512, 512, 1.0)
    with pytest.raises(BudgetTooSmallError):
        Budget(window=1_000, soft_ratio=0.1)


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("counted", "reported", "error"),
    [
        (1.5, 2, InvalidTypeError),
        (True, 2, InvalidTypeError),
        (10, True, InvalidTypeError),
        (10, "12", InvalidTypeError),
        (10, 12.0, InvalidTypeError),
        (0, 10, InvalidInputError),
        (10, 0, InvalidInputError),
        (10, -1, InvalidInputError),
        (10, {"output_tokens": 5}, InvalidInputError),
        (10, {"input_tokens": "5"}, InvalidTypeError),
        (10, {"input_tokens": 5, "cache_read_input_tokens": -1}, InvalidInputError),
        (10, {"input_tokens": 0, "cache_read_input_tokens": 0}, InvalidInputError),
        (10, {"prompt_tokens": True}, InvalidTypeError),
        (10, object(), InvalidTypeError),
    ],
)
def test_observe_refuses_what_is_not_a_usage(counted, reported, error):
    budget = claude()
    with pytest.raises(error) as raised:
        budget.observe(counted, reported)
    assert isinstance(raised.value, ContextCoreError)
    assert (budget.observations, budget.rejected, budget.ratio) == (0, 0, 1.2)


def test_observe_takes_numpy_integers():
    budget = claude()
    budget.observe(np.int64(10_000), np.int64(11_000))
    budget.observe(
        np.int32(10_000), {"input_tokens": np.int64(1_000), "cache_read_input_tokens": np.uint32(10_000)}
    )
    budget.observe(10_000, {"input_tokens": 11_000, "cache_read_input_tokens": None})
    assert budget.ratio == pytest.approx(1.1)


def test_budget_arguments_are_checked():
    assert Budget(window=np.int64(10_000)).window == 10_000
    assert type(Budget(window=np.int64(10_000)).window) is int
    with pytest.raises(InvalidTypeError):
        Budget(window=10_000.0)
    with pytest.raises(InvalidTypeError):
        Budget(window=10_000, soft_ratio="0.7")
    with pytest.raises(InvalidInputError):
        Budget(window=10_000, soft_ratio=float("nan"))
    for factor in (0.1, 4.5, float("nan"), float("inf")):
        with pytest.raises(InvalidInputError, match=r"safety_factor must be in \[0\.5, 4\]"):
            Budget(window=10_000, safety_factor=factor)
    with pytest.raises(InvalidTypeError):
        Budget(window=10_000, safety_factor=True)
    budget = Budget(window=10_000, soft_ratio=1.0)
    assert budget.messages(system_tokens=np.int64(1_000)) == 9_000
    with pytest.raises(InvalidInputError):
        budget.messages(system_tokens=-1)
    with pytest.raises(InvalidTypeError):
        budget.messages(system_tokens="1000")
    for tools in (5, {"type": "function"}, "read_file"):
        with pytest.raises(InvalidTypeError, match="tools must be a list of tool schemas"):
            budget.messages(tools=tools)


def test_an_int_past_a_floats_range_is_refused_as_input():
    with pytest.raises(InvalidInputError, match="finite"):
        Budget(window=100_000, soft_ratio=10**400)
