#!/usr/bin/env python3
"""An offline model of the benchmark's Mooncake runs: where to try a routing
or scheduling idea in seconds before building it (docs/bench/HISTORY.md,
"Late binding").

Eight engines scheduled as the simulated backends are (integration/sim,
vLLM V1's: a step serves running sequences first, in admission order, then
admits waiting ones FIFO within a budget of 8,192 tokens; a step costs 8 ms
+ 60 us per prefill token + 66 us per decoding sequence), each with a cache
of the trace's 512-token blocks held LRU at the fleet's capacity (27,000
blocks of 16 tokens each), fed the trace's first 20 minutes at the given
compression, arrivals that share a timestamp spread as kvmesh-bench spreads
them. Routing is the
oracle's cost (17 x uncached tokens + prefill queued) with the engines' true
state, ties spread at random. It leaves out the router's and the network's
time, the KV space of running sequences and preemption. Against the oracle
arm of resolution-evict-2x (6 repeats: hit rate 14.7%, TTFT p50 0.445 s,
p99 5.57 s) it gives 14.8%, 0.431 and 5.55 s (4 arrival jitters).

The fleet's hit rate is its capacity's: one LRU cache of the whole fleet's
size fed every prompt in order holds 14.8% of the tokens; were only the
blocks that are read again written (an admission no router can know: 28%
of requests have a follow-up, in every class of length), it would hold 26.9%
(--bounds).

    python3 docs/bench/model/qsim.py --compression 3 --seeds 4
"""
import argparse, collections, heapq, json, random, statistics

N, BUDGET, FIX, PT, PS = 8, 8192, 0.008, 60e-6, 66e-6
BLK = 512
CAP = 27000 * 16 // BLK


def load(path, comp, seed, minutes=20):
    tr = [json.loads(l) for l in open(path)]
    rnd = random.Random(seed)
    ts = [t['timestamp'] / 1000.0 / comp for t in tr]
    lim = minutes * 60.0 / comp
    out, i = [], 0
    while i < len(tr) and ts[i] < lim:
        j = i + 1
        while j < len(tr) and ts[j] == ts[i]:
            j += 1
        gap = ts[j] - ts[i] if j < len(tr) else 0
        for n in range(i, j):
            at = ts[i] + gap * (n - i) / (j - i) + (rnd.uniform(0, 0.05) if seed else 0)
            out.append(dict(at=at, P=tr[n]['input_length'], O=max(1, tr[n]['output_length']), h=tr[n]['hash_ids']))
        i = j
    out.sort(key=lambda r: r['at'])
    return out


class Engine:
    def __init__(self, k):
        self.k, self.lru, self.wait, self.run, self.busy, self.plan = k, collections.OrderedDict(), collections.deque(), [], False, []

    def cached(self, r):
        n = 0
        for h in r['h'][:(r['P'] - 1) // BLK]:
            if h not in self.lru:
                break
            n += 1
        return n * BLK

    def pending(self):
        """Uncached prefill of the requests without a first token."""
        return sum(q['P'] - q['done'] for q in self.run if q['gen'] == 0) + sum(q['P'] - self.cached(q) for q in self.wait)

    def step(self, now):
        budget, pre, dec, self.plan = BUDGET, 0, 0, []
        for q in self.run:
            if budget <= 0:
                break
            n = 1 if q['gen'] else min(q['P'] - q['done'], budget)
            if q['gen']:
                dec += 1
            else:
                pre += n
            self.plan.append((q, n))
            budget -= n
        while budget > 0 and self.wait and len(self.run) < 256:
            q = self.wait.popleft()
            q['cached'] = q['done'] = self.cached(q)
            for h in q['h'][:q['cached'] // BLK]:
                self.lru.move_to_end(h)
            self.run.append(q)
            n = min(q['P'] - q['done'], budget)
            pre += n
            self.plan.append((q, n))
            budget -= n
        return now + FIX + PT * pre + PS * dec

    def apply(self, now):
        for q, n in self.plan:
            if q['gen']:
                q['gen'] += 1
                continue
            q['done'] += n
            if q['done'] >= q['P']:
                q['gen'], q['ttft'] = 1, now - q['at']
                for h in q['h']:
                    self.lru[h] = 1
                    self.lru.move_to_end(h)
                while len(self.lru) > CAP:
                    self.lru.popitem(last=False)
        self.run = [q for q in self.run if q['gen'] < q['O'] or q['gen'] == 0]


TIES = random.Random(1)


def choose(r, engs):
    """The oracle's cost; ties (a miss to idle engines) spread at random, as
    the bench's oracle spreads them. Taking the first engine of a tie piles
    misses on engine 0 and costs the fleet ~0.8 points of hit rate."""
    return min(engs, key=lambda e: (17 * (r['P'] - e.cached(r)) + e.pending(), TIES.random())).k


def simulate(reqs, hold=None, hold_max=1e9):
    """hold(r, engs) -> True keeps r at the router; held requests are
    retried oldest first after every engine step, and sent at hold_max."""
    engs, ev, held = [Engine(k) for k in range(N)], [], collections.deque()
    rs = [dict(r, gen=0, done=0, cached=0) for r in reqs]

    def send(r, now):
        e = engs[choose(r, engs)]
        e.wait.append(r)
        if not e.busy:
            e.busy = True
            heapq.heappush(ev, (e.step(now), e.k))

    def drain(t):
        while held and (held[0]['until'] <= t or not hold(held[0], engs)):
            send(held.popleft(), t)
        for r in [r for r in held if r['until'] <= t]:
            held.remove(r)
            send(r, t)

    i = 0
    while i < len(rs) or ev or held:
        tn = rs[i]['at'] if i < len(rs) else float('inf')
        if ev and ev[0][0] <= tn:
            t, k = heapq.heappop(ev)
            e = engs[k]
            e.apply(t)
            if e.run or e.wait:
                heapq.heappush(ev, (e.step(t), k))
            else:
                e.busy = False
            drain(t)
            continue
        if not ev and i >= len(rs):
            while held:
                send(held.popleft(), tn)
            continue
        r = rs[i]
        i += 1
        drain(tn)
        if hold and hold(r, engs):
            r['until'] = tn + hold_max
            held.append(r)
        else:
            send(r, tn)
    return rs


def late_binding(min_tokens, queue_tokens=0, spare=0):
    """kvmesh.hold_min_prompts and its companions, in tokens."""
    def hold(r, engs):
        if r['P'] - max(e.cached(r) for e in engs) < min_tokens:
            return False
        return sum(1 for e in engs if e.pending() <= queue_tokens) <= spare
    return hold


def bounds(reqs):
    """Hit rates of one LRU cache of the fleet's size fed every prompt in
    arrival order: writing every block, and writing only the blocks that
    some later prompt reads (the admission a router cannot know)."""
    reused, seen = set(), set()
    for r in reqs:
        reused.update(h for h in r['h'] if h in seen)
        seen.update(r['h'])
    out = []
    for admit in (False, True):
        lru, hit, tot = collections.OrderedDict(), 0, 0
        for r in reqs:
            n = 0
            for h in r['h'][:(r['P'] - 1) // BLK]:
                if h not in lru:
                    break
                lru.move_to_end(h)
                n += 1
            hit, tot = hit + n * BLK, tot + r['P']
            for h in r['h']:
                if not admit or h in reused:
                    lru[h] = 1
                    lru.move_to_end(h)
            while len(lru) > N * CAP:
                lru.popitem(last=False)
        out.append(100 * hit / tot)
    return out


def summary(rs):
    t = sorted(r['ttft'] for r in rs)
    n = len(t)
    return 100 * sum(r['cached'] for r in rs) / sum(r['P'] for r in rs), t[n // 2], t[int(n * .9)], t[int(n * .99)]


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--trace', default='../shared/traces/mooncake/conversation_trace.jsonl')
    ap.add_argument('--compression', type=float, default=2)
    ap.add_argument('--seeds', type=int, default=4, help='arrival jitters (0-50 ms) to average over')
    ap.add_argument('--bounds', action='store_true', help='print the fleet-sized LRU bounds and exit')
    a = ap.parse_args()
    if a.bounds:
        every, admitted = bounds(load(a.trace, a.compression, 0))
        print('one fleet-sized LRU: every block written %.2f%%, only blocks read again %.2f%%' % (every, admitted))
        raise SystemExit
    arms = {'greedy (the oracle)': dict(),
            'late binding, 7,000 tokens': dict(hold=late_binding(7000)),
            'late binding, 3 s at most': dict(hold=late_binding(7000), hold_max=3.0),
            'late binding, one spare backend': dict(hold=late_binding(7000, 4000, 1))}
    res = collections.defaultdict(list)
    for seed in range(1, a.seeds + 1):
        reqs = load(a.trace, a.compression, seed)
        for name, kw in arms.items():
            res[name].append(summary(simulate(reqs, **kw)))
    for name, l in res.items():
        m = [statistics.mean(x[i] for x in l) for i in range(4)]
        print('%-34s hit %.2f%%  TTFT p50 %.3f  p90 %.3f  p99 %.3f' % (name, *m))
