"""A small multilingual corpus for parity tests: every class of text the
tokenizer must get exactly right."""

from __future__ import annotations

import inspect
import json

CORPUS: dict[str, str] = {
    "english_prose": (
        "It was the best of times, it was the worst of times; it was the age of wisdom... "
        "She'd said they'll go, we've seen it, I'M SURE it's THEIR dog's bone. "
        "Mr. O'Neil paid $1,234.56 on 2024-03-15 at 09:30 for 3.5kg (≈7.7 lb)."
    ),
    "source_code": inspect.getsource(json.JSONEncoder.encode)
    + "\n\tfor (int i = 0; i < n; ++i) {\r\n\t\tsum += a[i] * b[i];\r\n\t}\n",
    "chinese": "为PaymentCallbackService.addRetryLogic方法添加超时重试，必须保证事务一致性。"
    "上下文窗口的管理决定了智能体在第六十轮时是否还记得用户的约束。",
    "japanese": "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"
    "カタカナとひらがな、漢字の混在。",
    "korean": "대화 기록이 길어지면 모델은 초기 제약 조건을 잊어버립니다.",
    "arabic_hindi": "مرحبا بالعالم ١٢٣ नमस्ते दुनिया १२३",
    "emoji_zwj": "\U0001f469\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family, "
    "\U0001f3f3\ufe0f\u200d\U0001f308 flag, \U0001f44d\U0001f3fd thumbs, \U0001f1ef\U0001f1f5 flags, "
    "1\ufe0f\u20e3 keycap, \U0001f9d1\U0001f3ff\u200d\U0001f680",
    "whitespace_runs": "a" + " " * 37 + "b\n\n\n   \t\t \r\n\r\n" + " " * 100 + "c" + "\n" * 20 + "   ",
    "special_lookalikes": "<|endoftext|> <|fim_prefix|><|fim_middle|><|fim_suffix|> "
    "<|endofprompt|> <|im_start|>",
    "combining_marks": "e\u0301 a\u0308\u0304 \u0915\u094d\u0937 Z\u0351\u0367\u0310a\u0328l\u0358g\u0325o",
    "digits_and_math": "3.14159265358979 12345678901234567890 ½ ⅔ Ⅻ ٣ 𝟙𝟚𝟛 x² + y² = z²",
    "urls_and_logs": (
        "curl -s https://api.example.com/v1/items?id=42&sort=desc | jq '.items[]'\n"
        'Traceback (most recent call last):\n  File "app.py", line 12, in <module>\n'
        "ValueError: invalid literal for int() with base 10: 'abc'"
    ),
    "json_minified": json.dumps(
        {"a": [1, 2.5, None, True], "nested": {"k": "v" * 30}}, separators=(",", ":")
    ),
    "base64": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kg"
    "AAAABJRU5ErkJggg==",
    "long_word": "Donaudampfschifffahrtsgesellschaftskapitän" * 5 + "a" * 300,
    "contractions_folding": "'s 'S 'ſ 'T 'RE 'Ve 'M 'LL 'd ’s isn't DON'T",
    "empty": "",
}
