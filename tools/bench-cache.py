#!/usr/bin/env python3
"""bench-cache.py — prompt caching in `specula serve`: time to first token of the last turn of a
multi-turn chat with the cache (the default) and with "cache_prompt": false, and the aggregate
tok/s of N clients each running such a chat, on vs off.

usage: python3 tools/bench-cache.py PORT [--turns 6] [--clients 8] [--history 1000] [--reps 3] [--json] [--extra JSON]

Start the server first (e.g. build/specula serve --port 8080 -np 8 -c 4096). Each chat opens with
a system prompt sized so that the last turn's prompt is about --history tokens; replies are greedy,
48 tokens. Prints one line per figure and the ratios; --json adds one JSON line of the medians
(ttft_on / ttft_off ms, tps_on / tps_off, the last turn's prompt and cached tokens); --extra adds
the fields of a JSON object to every request (e.g. '{"speculative": false}' for specula). Any server
that takes "cache_prompt" and streams usage with prompt_tokens_details (llama-server does) works.
Standard library only."""
import argparse
import http.client
import json
import statistics
import threading
import time

WORDS = ("the river runs past old stone walls while traders count silver and children chase "
         "gulls along the harbour where ships from distant ports unload spice cloth and iron").split()


def text_of(n_words, seed):
    return " ".join(WORDS[(i * 7 + seed * 13) % len(WORDS)] for i in range(n_words))


EXTRA = {}


def chat_turn(port, messages, cache, max_tokens=48):
    """one streamed chat request: (ms to the first content chunk, reply text, usage)"""
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}, "cache_prompt": cache, **EXTRA})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    ttft, text, usage = None, [], None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices", []):
            d = ch.get("delta", {}).get("content")
            if d:
                if ttft is None:
                    ttft = (time.time() - t0) * 1000
                text.append(d)
    c.close()
    return ttft if ttft is not None else (time.time() - t0) * 1000, "".join(text), usage


def conversation(port, seed, turns, history, cache):
    """a chat of `turns` turns; returns (ttft of the last turn, completion tokens, cached tokens of the last)"""
    sys_words = max(10, history * 3 // 4 - turns * 70)
    messages = [{"role": "system", "content": text_of(sys_words, seed)}]
    n_tok, last = 0, (0, 0)
    for k in range(turns):
        messages.append({"role": "user", "content": "Question %d: %s?" % (k + 1, text_of(25, seed + k))})
        ttft, reply, usage = chat_turn(port, messages, cache)
        messages.append({"role": "assistant", "content": reply})
        n_tok += usage["completion_tokens"] if usage else 0
        last = (ttft, usage["prompt_tokens_details"]["cached_tokens"] if usage else -1, usage["prompt_tokens"] if usage else -1)
    return last[0], n_tok, last[1], last[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--history", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--extra", default="{}")
    a = ap.parse_args()
    EXTRA.update(json.loads(a.extra))
    ttft = {True: [], False: []}
    tps, last = {}, (0, 0)
    for rep in range(a.reps):
        for cache in (True, False):  # interleaved
            t, _, cached, prompt = conversation(a.port, 100 + rep, a.turns, a.history, cache)
            ttft[cache].append(t)
            last = (prompt, cached) if cache else last
            print("rep %d cache %-5s: turn %d TTFT %.0f ms (prompt %d tokens, %d cached)" %
                  (rep, cache, a.turns, t, prompt, cached), flush=True)
    on, off = statistics.median(ttft[True]), statistics.median(ttft[False])
    print("TTFT of turn %d: %.0f ms with the cache, %.0f ms without: ratio %.3f" % (a.turns, on, off, on / off))
    for cache in (True, False):
        toks = [0] * a.clients
        def run(i):
            toks[i] = conversation(a.port, 1000 + i * 17, a.turns, a.history, cache)[1]
        th = [threading.Thread(target=run, args=(i,)) for i in range(a.clients)]
        t0 = time.time()
        for t in th:
            t.start()
        for t in th:
            t.join()
        dt = time.time() - t0
        tps[cache] = sum(toks) / dt
        print("%d clients x %d turns, cache %-5s: %d tokens in %.1f s = %.1f tok/s" %
              (a.clients, a.turns, cache, sum(toks), dt, sum(toks) / dt), flush=True)
    if a.json:
        print(json.dumps({"ttft_on": on, "ttft_off": off, "tps_on": tps[True], "tps_off": tps[False],
                          "prompt": last[0], "cached": last[1], "clients": a.clients, "turns": a.turns}))


if __name__ == "__main__":
    main()
