import struct, sys, statistics as st
from collections import defaultdict
N, B, W, E = 256, 64, 4, 12
REC = 2 * E + 2
path = sys.argv[1]
data = open(path, 'rb').read()
vals = struct.unpack('<%dQ' % (len(data) // 8), data)
launch = defaultdict(list)
for i in range(0, len(vals), REC):
    r = vals[i:i + REC]
    if r[0] == 0: continue
    kind = r[1] & 0xff; smid = (r[1] >> 8) & 0xff; grid = (r[1] >> 16) & 0xffff
    blk = (i // REC // W) % B; warp = (i // REC) % W
    g = [r[2 + 2 * k] for k in range(E)]; c = [r[3 + 2 * k] for k in range(E)]
    launch[r[0]].append((kind, smid, grid, blk, warp, g, c))
gids = sorted(launch)
full = [x for x in gids if len(launch[x]) == max(len(v) for v in launch.values())]
print("%s: %d launches traced, %d complete (%d warps each)" % (path, len(gids), len(full), len(launch[full[0]]) if full else 0))
names = ['entry', 'pre-wait', 'post-wait', 'loads issued', 'pos in', 'token checked', 'weights+ballot', 'row in', 'norm done', 'cos/sin in', 'x ready', 'stores acked']
# globaltimer: offsets from the launch's first entry
per = defaultdict(list); cyc = defaultdict(list); spans = []; lastkind = defaultdict(int)
starts = {}; ends = {}; waits = {}
for x in full:
    L = launch[x]
    t0 = min(w[5][0] for w in L); t1 = max(w[5][E-1] for w in L)
    starts[x] = t0; ends[x] = t1; waits[x] = min(w[5][2] for w in L)
    spans.append(t1 - t0)
    lastkind[max(L, key=lambda w: w[5][E-1])[0]] += 1
    for w in L:
        for k in range(E):
            per[(w[0], k)].append(w[5][k] - t0)
            if k: cyc[(w[0], k)].append(w[6][k] - w[6][k - 1])
print("globaltimer distinct low bits:", sorted(set(v % 64 for x in full[:20] for w in launch[x] for v in w[5]))[:16])
print("kernel span (first entry -> last stores acked) ns: median %.0f  p10 %.0f p90 %.0f" % (st.median(spans), sorted(spans)[len(spans)//10], sorted(spans)[9*len(spans)//10]))
print("last to finish, by kind:", dict(lastkind))
d_start = []; d_gap = []; d_wait = []
for a, b in zip(full, full[1:]):
    if b == a + 1 or True:
        if b - a > 3: continue
        d_start.append(starts[b] - starts[a]); d_gap.append(starts[b] - ends[a]); d_wait.append(waits[b] - ends[a])
if d_start:
    print("consecutive launches (%d pairs): start-to-start median %.0f ns; next entry - this end %.0f ns; next wait return - this end %.0f ns" % (len(d_start), st.median(d_start), st.median(d_gap), st.median(d_wait)))
print("%-13s" % "event" + "".join("%22s" % ("kind %d ns (cyc)" % k) for k in range(3)))
for k in range(E):
    line = "%-13s" % names[k]
    for kind in range(3):
        v = per.get((kind, k))
        if v: line += "%14.0f (%5.0f)" % (st.median(v), st.median(cyc[(kind, k)]) if k else 0)
        else: line += "%22s" % "-"
    print(line)
