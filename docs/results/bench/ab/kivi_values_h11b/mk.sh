#!/bin/bash
# link the value microbench against the current build of /work/wt/kern as /tmp/kvb/vb_$1
cd /work/wt/kern && cmake --build build -j2 --target snapkv_kv >/dev/null && \
g++ -O2 -std=c++20 -Isrc -Iinclude /tmp/kvb/vbench.cpp build/libsnapkv_kv.a build/libsnapkv_ops.a build/libsnapkv_util.a -lgomp -lpthread -o /tmp/kvb/vb_$1
