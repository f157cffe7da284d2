-- wrk script for bench/http_wrk.sh: every connection posts the same greedy completion
-- request to POST /v1/completions. wrk counts answers outside 2xx/3xx in
-- summary.errors.status, printed here beside the latency percentiles.
wrk.method = "POST"
wrk.path = "/v1/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model": "demo-target", "prompt": "def fibonacci(n):", "max_tokens": ' ..
           (os.getenv("WRK_MAX_TOKENS") or "32") .. ', "temperature": 0}'

done = function(summary, latency, requests)
  io.write(string.format("requests %d | errors: connect %d read %d write %d status %d timeout %d\n",
    summary.requests, summary.errors.connect, summary.errors.read, summary.errors.write,
    summary.errors.status, summary.errors.timeout))
  io.write(string.format("latency ms: p50 %.1f p90 %.1f p99 %.1f max %.1f\n",
    latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000,
    latency.max / 1000))
end
