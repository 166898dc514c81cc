"""Shared hypothesis settings (budget from the environment) and text strategies."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Quick locally, thorough in CI: HYPOTHESIS_PROFILE=ci (see .ci/run).
settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile("soak", max_examples=5000, deadline=None, suppress_health_check=list(HealthCheck))
settings.register_profile("ci", max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

ENCODINGS = ["o200k_base", "cl100k_base", "p50k_base", "r50k_base"]

# Characters that exercise every branch of the split patterns: each letter
# category, combining marks, digits of several scripts, every kind of space,
# newlines, apostrophes (and the case-folding long s), slashes, emoji, ZWJ.
EDGE_ALPHABET = list(
    "abstdmlverASTDMLVERſKǅʰ中文ßÉé\u0301\u0903\u20dd07٣Ⅻ½"
    " \u00a0\u2003\t\n\r\x0b\x0c\x85\u2028\u3000''’/.,!-_\"😀\u200d𝐀𝐚𝟙\U000e0100"
)

edge_text = st.text(alphabet=st.sampled_from(EDGE_ALPHABET), max_size=40)
"""Short texts dense in the pre-tokenizer's edge cases."""

any_text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=200)
"""Arbitrary Unicode (valid, so it has a UTF-8 form)."""

texts = st.one_of(edge_text, any_text)
