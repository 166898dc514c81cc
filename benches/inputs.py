"""Deterministic benchmark inputs, built at run time from the standard library
(English prose and code) and a word list (Chinese), so nothing large is
committed and every run measures the same texts."""

from __future__ import annotations

import base64
import functools
import inspect
import json
import random

# Common Chinese words and phrases of the kind agent conversations hold.
_ZH_VOCABULARY = """
我们 需要 上下文 窗口 管理 模型 智能体 用户 约束 必须 禁止 确保 验证
系统 提示 工具 调用 结果 错误 重试 超时 事务 一致性 数据库 接口 服务
回调 支付 订单 日志 分析 总结 记忆 文件 路径 配置 部署 测试 性能
延迟 吞吐 缓存 命中 压缩 摘要 历史 消息 会话 轮次 预算 令牌 计数
截断 优先级 锚点 固定 检索 向量 相似度 重排 遗忘 新鲜度 访问 频率
阈值 清理 合并 去重 冲突 版本 分支 回滚 快照 崩溃 恢复 持久化 同步
异步 并发 锁 进程 线程 请求 响应 协议 格式 解析 校验 安全 权限 目录
名称 参数 返回 函数 方法 类 对象 字段 类型 列表 字典 字符串 数字
时间 日期 今天 明天 首先 然后 最后 因为 所以 但是 如果 那么 虽然
而且 或者 并且 已经 正在 将要 可以 应该 不能 非常 比较 更加 最 很
都 也 还 就 才 又 再 只 总是 从不 经常 有时 这个 那个 哪些 什么
怎么 为什么 如何 问题 方案 实现 设计 架构 模块 组件 依赖 升级 迁移
兼容 稳定 可靠 高效 简单
"""
_ZH_WORDS = _ZH_VOCABULARY.split()
_ZH_PUNCT = "，，，。。；：！？、"


@functools.cache
def english(min_chars: int) -> str:
    import argparse
    import collections
    import email
    import logging
    import unittest

    docs = []
    for module in (argparse, collections, email, logging, unittest, json, random, inspect):
        for obj in vars(module).values():
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str) and len(doc) > 200:
                docs.append(doc)
    return _at_least("\n\n".join(docs), min_chars)


@functools.cache
def code(min_chars: int) -> str:
    import argparse
    import logging

    return _at_least(inspect.getsource(argparse) + inspect.getsource(logging), min_chars)


@functools.cache
def chinese(min_chars: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < min_chars:
        sentence = "".join(rng.choice(_ZH_WORDS) for _ in range(rng.randint(4, 14)))
        if rng.random() < 0.2:
            sentence += rng.choice(["PaymentService", "addRetryLogic", "v2.3.1", "HTTP 500", "config.yaml"])
        sentence += rng.choice(_ZH_PUNCT)
        out.append(sentence)
        size += len(sentence)
    return "".join(out)


def _at_least(text: str, min_chars: int) -> str:
    while len(text) < min_chars:
        text += "\n" + text
    return text[:min_chars]


MB = 1 << 20


@functools.cache
def worst_case(kind: str) -> str:
    """A megabyte of one class of input."""
    rng = random.Random(7)
    if kind == "one_letter":
        return "a" * MB
    if kind == "digits":
        return "".join(rng.choice("0123456789") for _ in range(MB))
    if kind == "base64":
        return base64.b64encode(rng.randbytes(MB * 3 // 4)).decode()[:MB]
    if kind == "minified_json":
        rows = [{"id": i, "name": f"user_{i}", "tags": ["a", str(i)], "score": i / 7} for i in range(30_000)]
        return json.dumps(rows, separators=(",", ":"))[:MB]
    if kind == "cjk_no_spaces":
        text = chinese(MB // 3, seed=3)
        return "".join(c for c in text if "\u4e00" <= c <= "\u9fff")[: MB // 3]  # ~1 MB of UTF-8
    if kind == "prose":
        return english(MB)
    raise ValueError(kind)


WORST_CASES = ["one_letter", "digits", "base64", "minified_json", "cjk_no_spaces", "prose"]


def chat_messages(count: int, seed: int = 11) -> list[str]:
    """``count`` chat-sized texts of 20-1,500 characters, mixed languages."""
    rng = random.Random(seed)
    sources = [english(200_000), code(200_000), chinese(60_000, seed=seed)]
    texts = []
    for _ in range(count):
        source = rng.choice(sources)
        length = rng.randint(20, 1500)
        start = rng.randrange(0, len(source) - length)
        texts.append(source[start : start + length])
    return texts


def history(count: int, seed: int = 5) -> list[dict[str, str]]:
    """A chat history of ``count`` string-content messages, as the cookbook counts them."""
    rng = random.Random(seed)
    texts = chat_messages(count, seed)
    roles = ["user", "assistant"]
    messages = [{"role": "system", "content": "You are a careful coding agent. Never delete data."}]
    for i, text in enumerate(texts[1:]):
        message = {"role": roles[i % 2], "content": text}
        if rng.random() < 0.05:
            message["name"] = "reviewer"
        messages.append(message)
    return messages


def agent_history(turns: int, provider: str, seed: int = 3) -> list[dict]:
    """A valid agent history: user asks, the assistant calls tools (their
    results follow) and answers; texts of chat size, Anthropic or OpenAI shape."""
    rng = random.Random(seed)
    texts = chat_messages(200, seed)
    messages: list[dict] = (
        [{"role": "system", "content": "You are a careful coding agent."}] if provider == "openai" else []
    )
    n = 0
    while len(messages) < turns:
        messages.append({"role": "user", "content": rng.choice(texts)})
        if rng.random() < 0.5:
            ids = [f"call_{n}_{k}" for k in range(rng.randint(1, 3))]
            n += 1
            if provider == "openai":
                calls = [
                    {"id": i, "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}
                    for i in ids
                ]
                messages.append({"role": "assistant", "content": None, "tool_calls": calls})
                messages.extend(
                    {"role": "tool", "tool_call_id": i, "content": rng.choice(texts)} for i in ids
                )
            else:
                uses = [{"type": "tool_use", "id": i, "name": "search", "input": {"q": "x"}} for i in ids]
                thinking = {"type": "thinking", "thinking": rng.choice(texts), "signature": "c2ln"}
                messages.append({"role": "assistant", "content": [thinking, *uses]})
                results = [
                    {"type": "tool_result", "tool_use_id": i, "content": rng.choice(texts)} for i in ids
                ]
                messages.append({"role": "user", "content": results})
                messages.append({"role": "assistant", "content": rng.choice(texts)})
                continue
        messages.append({"role": "assistant", "content": rng.choice(texts)})
    return messages[:turns]


def broken_history(turns: int, provider: str, seed: int = 4) -> list[dict]:
    """``agent_history`` with about one message in ten damaged: results lost or
    duplicated, placeholders, cancel replies, legacy and empty messages, roles
    repeated."""
    rng = random.Random(seed)
    messages = agent_history(turns, provider, seed)
    junk = [
        {"role": "assistant", "content": "[tool_call: search]"},
        {"role": "assistant", "content": "The request was cancelled..."},
        {"role": "tool", "tool_call_id": "ghost", "content": "stale result"},
        {"role": "user", "content": "   "},
        {"role": "user", "content": "and one more thing"},
    ]
    out: list[dict] = []
    for message in messages:
        r = rng.random()
        if r < 0.03:
            continue  # lost (a result, a call, a turn)
        out.append(message)
        if r > 0.97:
            out.append(message)  # duplicated
        elif r > 0.90:
            out.append(rng.choice(junk))
    return out


@functools.cache
def session(turns: int, provider: str) -> list[dict]:
    """An ordinary session for selection: ``agent_history`` cut back to its
    last plain answer (no tool call left open), then the user's new input."""
    messages = agent_history(turns - 1, provider)
    while messages and not (messages[-1]["role"] == "assistant" and isinstance(messages[-1]["content"], str)):
        messages.pop()
    return [*messages, {"role": "user", "content": "Now run the failing tests again and report."}]
