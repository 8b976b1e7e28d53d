// BENCH_HEAP_SAMPLE=<dir>: loaded with --require into each dispatcher process. V8's sampling heap profiler, keeping
// the samples of objects the GC has collected too, so the profile says where the process allocates (what its GC
// has to sweep), not only what is alive at the end. Written to <dir>/<pid>.heapprofile every half second and at exit
// (Chrome DevTools' Memory tab opens it; `node --import tsx bench/heap-summary.ts <file>` lists the top functions).
// The profiler itself allocates (node:inspector's frames in the summary): compare runs, do not quote their rates.
'use strict';
const inspector = require('node:inspector');
const fs = require('node:fs');
const path = require('node:path');

const dir = process.env.BENCH_HEAP_SAMPLE;
if (dir) {
  const session = new inspector.Session();
  session.connect();
  session.post('HeapProfiler.enable');
  session.post('HeapProfiler.startSampling', {
    samplingInterval: 4096,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  const file = path.join(dir, `${process.pid}.heapprofile`);
  const write = () =>
    session.post('HeapProfiler.getSamplingProfile', (error, result) => {
      if (!error) fs.writeFileSync(file, JSON.stringify(result.profile));
    });
  setInterval(write, 500).unref();
  process.on('exit', write);
}
