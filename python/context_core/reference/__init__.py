"""A pure-Python twin of context_core's Rust hot paths.

Written independently, as plain idiomatic Python over OpenAI's ``tiktoken``
package, from the documented behaviour (README.md) rather than from the Rust
code: it is the oracle of the differential tests and the baseline of the
benchmarks. It imports without tiktoken; counting with it needs the ``test`` extra
(``pip install 'context-core[test]'``).
"""

from __future__ import annotations

from context_core.reference.log import MessageLog, RepairReport
from context_core.reference.tokenizer import Tokenizer, encoding_name_for_model

__all__ = ["MessageLog", "RepairReport", "Tokenizer", "encoding_name_for_model"]
