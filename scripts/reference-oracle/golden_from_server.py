#!/usr/bin/env python3
"""Asks a running llama-server for the golden file's prompts and writes its
answers in the golden format (top-5 log-probabilities at full precision), so
cairn's golden test can run against it: CAIRN_SHARED_DIR=<dir with models/ and
golden/>. Usage: golden_from_server.py SHARED_DIR MODEL_NAME PORT OUT_JSON"""
import json
import sys
import urllib.request

shared, model, port, out = sys.argv[1:5]
golden = json.load(open(f'{shared}/golden/{model}.json'))
for case in golden['cases']:
    req = {'prompt': case['prompt'], 'n_predict': len(case['tokens']), 'temperature': 0,
           'n_probs': 5, 'cache_prompt': False}
    http = urllib.request.Request(f'http://127.0.0.1:{port}/completion', json.dumps(req).encode(),
                                  {'Content-Type': 'application/json'})
    answer = json.load(urllib.request.urlopen(http))
    if answer['content'] != case['text']:
        print(f'note: greedy text differs from the golden file for {case["prompt"]!r}')
    # The server's own continuation, so teacher forcing replays what it saw.
    case['text'] = answer['content']
    case['tokens'] = [step['id'] for step in answer['completion_probabilities']]
    case['steps'] = [{'top': [[t['id'], t['token'], t['logprob']] for t in step['top_logprobs']]}
                     for step in answer['completion_probabilities']]
json.dump(golden, open(out, 'w'))
