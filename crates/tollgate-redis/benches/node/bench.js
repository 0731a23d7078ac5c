// rate-limiter-flexible (RateLimiterRedis over ioredis) at a fixed number of
// concurrent callers, each with its own connection, on random keys.
//
// node bench.js PORT CONCURRENCY SECONDS KEYS
// prints: decisions_per_second p50_us p99_us
'use strict';

const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

const [port, concurrency, seconds, keys] = process.argv.slice(2).map(Number);

async function caller(limiter, deadline, latencies) {
  let done = 0;
  while (performance.now() < deadline) {
    const key = 'k' + Math.floor(Math.random() * keys);
    const start = performance.now();
    try {
      await limiter.consume(key, 1);
    } catch (rejection) {
      if (rejection instanceof Error) throw rejection; // a store error, not a denial
    }
    latencies.push(performance.now() - start);
    done += 1;
  }
  return done;
}

async function main() {
  const clients = [];
  const limiters = [];
  for (let i = 0; i < concurrency; i++) {
    const client = new Redis({ port, host: '127.0.0.1', enableOfflineQueue: false, lazyConnect: true });
    await client.connect();
    clients.push(client);
    // 1000 per minute, like the Rust side's GCRA quota.
    limiters.push(new RateLimiterRedis({ storeClient: client, keyPrefix: 'rlf' + process.pid, points: 1000, duration: 60 }));
  }
  // Warm up (script load, connections).
  await Promise.all(limiters.map((l) => l.consume('warm', 1).catch(() => {})));
  const latencies = [];
  const start = performance.now();
  const counts = await Promise.all(limiters.map((l) => caller(l, start + seconds * 1000, latencies)));
  const elapsed = (performance.now() - start) / 1000;
  latencies.sort((a, b) => a - b);
  const pct = (p) => Math.round(latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] * 1000);
  const total = counts.reduce((a, b) => a + b, 0);
  console.log(`${Math.round(total / elapsed)} ${pct(0.5)} ${pct(0.99)}`);
  await Promise.all(clients.map((c) => c.quit()));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
