// ng_browser_check.js - our layers in Neuroglancer, in headless Chromium
// driven by playwright-core, for acceptance/browser_test.sh (which installs
// both, makes the layers and serves them).
//
//   node ng_browser_check.js --ng NG_INDEX_URL --data DATA_URL
//        --expect EXPECT.json --out DIR --image PATH --segmentation PATH
//        [--annotations PATH] [--multires PATH]
//
// PATHs are layers under DATA_URL. EXPECT.json: {"segments": [ids],
// "synapses": {id: {relationship: [synapse ids]}}} (browser_test.sh makes
// it from the JSON-lines synapse tables). The state: the image layer, the
// segmentation layer (its legacy meshes, the segments selected), with
// --multires a second segmentation layer whose one source is that mesh
// directory (same segments), with --annotations an annotation layer linked
// to the segmentation layer through every relationship and filtered by it;
// four panels. Waits until Neuroglancer says every panel has drawn what it
// needs (viewer.display.isReady(), twice in a row) and every in-page check
// below holds: 120 s at most, 5 s without a response once something failed.
// Then writes DIR/ng-4panel.png, DIR/panel-N.png (one per panel; their
// pixels are browser_test.sh's to check), DIR/state.json, DIR/page.json
// (what the page held) and prints the PNGs' paths.
//
// Fails (exit 1, one line per problem) on:
//  - any HTTP response with status >= 400 (the URL named), any request
//    that failed outright (but one Neuroglancer itself cancelled); the one
//    exception: a relationship index chunk of a segment that has no
//    synapse in that relationship may be absent (404: Neuroglancer's "none"
//    for an unsharded index; 2.37.5 refuses an empty 8-byte chunk);
//  - any console error, any uncaught page error, any "Error retrieving
//    chunk" of Neuroglancer's chunk worker (a chunk it could not fetch or
//    decode);
//  - per selected segment, legacy meshes: mesh/<id>:0 or a fragment it
//    lists not fetched with success; in the page, no manifest chunk or a
//    fragment chunk not in GPU memory (Neuroglancer's ChunkState);
//  - per selected segment, multi-resolution meshes: <id>.index or <id> not
//    fetched with success (unsharded); in the page, no manifest chunk, no
//    fragment loaded or one not loaded; a level of detail with fragment
//    bytes (the manifest's) not loaded in the first view nor with the
//    layer's mesh render scale at 0.01 (the finest everywhere);
//  - per selected segment and relationship: the relationship index chunk
//    (<annotations>/<key>/<id>) not fetched with success, or its ids (the
//    chunk's last count x uint64, the spec's layout) not exactly the
//    synapse ids EXPECT gives; in the page, no segment-filtered chunk.
'use strict';
const fs = require('fs');
const path = require('path');
const { chromium } = require('playwright-core');

function parseArgs(argv) {
  const a = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || argv[i + 1] === undefined)
      throw new Error('bad argument ' + argv[i]);
    a[argv[i].slice(2)] = argv[i + 1];
  }
  for (const k of ['ng', 'data', 'expect', 'out', 'image', 'segmentation'])
    if (!a[k]) throw new Error('--' + k + ' is required');
  return a;
}

// In the page: what Neuroglancer holds for each layer. Class names are
// minified in the bundle, field names are not: mesh render layers are
// found by their source's fragmentSource, annotation sources by their
// segmentFilteredSources. Chunk states (neuroglancer/chunk_manager/base.ts):
// GPU_MEMORY 0, SYSTEM_MEMORY 1, ..., FAILED 6; the page holds a chunk
// once its worker has fetched and decoded it.
function inspectPage(segments) {
  const v = window.viewer;
  const out = { ready: !!(v && v.display && v.display.isReady()), layers: {} };
  if (!v) return out;
  const keyOf = (id) => {
    const n = BigInt(id);
    return `${n & 0xffffffffn},${n >> 32n}`;
  };
  for (const ml of v.layerManager.managedLayers) {
    const l = ml.layer;
    const info = { meshes: [], annotations: [] };
    out.layers[ml.name] = info;
    if (!l) continue;
    for (const rl of l.renderLayers || []) {
      const src = rl.source;
      if (src && src.fragmentSource && src.chunks) {
        const mesh = { multiscale: false, segments: {} };
        for (const id of segments) {
          const key = keyOf(id);
          const m = src.chunks.get(key);
          const s = { manifest: m ? m.state : null, fragments: 0, inGpu: 0,
                      lods: [], states: [] };
          if (m && m.manifest) mesh.multiscale = true;
          if (m && m.fragmentIds) {
            for (const f of m.fragmentIds) {
              const c = src.fragmentSource.chunks.get(`${key}/${f}`);
              s.fragments++;
              if (c && c.state === 0) s.inGpu++;
              else s.states.push(c ? c.state : null);
            }
          } else if (m && m.manifest) {
            const lods = new Set();
            for (const [k, c] of src.fragmentSource.chunks) {
              if (!k.startsWith(key + '/')) continue;
              s.fragments++;
              // Loaded: in GPU memory, or in system memory when fetched
              // ahead of being drawn (another level of detail).
              if (c.state <= 1) {
                s.inGpu++;
                lods.add(Number(k.slice(key.length + 1).split(':')[0]));
              } else {
                s.states.push(c.state);
              }
            }
            s.lods = [...lods].sort((x, y) => x - y);
            s.numLods = m.manifest.lodScales.filter((x) => x > 0).length;
          }
          mesh.segments[id] = s;
        }
        info.meshes.push(mesh);
      }
      const bases = [rl.base, rl.source, rl].filter(Boolean);
      for (const b of bases) {
        const asrc = b.source && b.source.segmentFilteredSources ? b.source
                   : b.segmentFilteredSources ? b : null;
        if (!asrc || info.annotations.some((x) => x.src === asrc)) continue;
        const ann = { src: asrc, relationships: asrc.relationships.slice(),
                      segments: {} };
        for (const id of segments) {
          ann.segments[id] = asrc.segmentFilteredSources.map((fs) => {
            const c = fs.chunks.get(keyOf(id));
            return c ? { state: c.state, hasData: c.data !== undefined } : null;
          });
        }
        info.annotations.push(ann);
      }
    }
    for (const a of info.annotations) delete a.src;
  }
  return out;
}

// The levels of detail of a multi-resolution manifest (<id>.index) that
// hold fragment bytes: chunk_shape 3 x f32, grid_origin 3 x f32, num_lods
// u32, lod_scales num_lods x f32, vertex_offsets num_lods x 3 x f32,
// num_fragments_per_lod num_lods x u32, then per level its fragment
// positions (3 x n u32) and fragment sizes (n u32).
function multiresLevels(b) {
  let o = 24;
  const need = (n) => { if (o + n > b.length) throw new Error(`manifest of ${b.length} bytes is short`); };
  need(4);
  const n = b.readUInt32LE(o); o += 4;
  need(n * 4 * 5);
  o += n * 4 + n * 12;
  const per = [];
  for (let l = 0; l < n; l++, o += 4) per.push(b.readUInt32LE(o));
  const levels = [];
  for (let l = 0; l < n; l++) {
    need(per[l] * 16);
    o += per[l] * 12;
    let bytes = 0;
    for (let k = 0; k < per[l]; k++, o += 4) bytes += b.readUInt32LE(o);
    if (bytes > 0) levels.push(l);
  }
  if (o !== b.length) throw new Error(`manifest of ${b.length} bytes, the layout gives ${o}`);
  return levels;
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const expect = JSON.parse(fs.readFileSync(a.expect, 'utf8'));
  const segments = expect.segments;
  const layerUrl = (p) => a.data + '/' + p;
  const getJson = async (u) => {
    const r = await fetch(u);
    if (!r.ok) throw new Error(`HTTP ${r.status}: GET ${u} (a layer's info the state needs)`);
    return r.json();
  };
  const img = await getJson(layerUrl(a.image) + '/info');
  const s0 = img.scales[0];
  const segInfo = await getJson(layerUrl(a.segmentation) + '/info');
  const meshDir = layerUrl(a.segmentation) + '/' + (segInfo.mesh || 'mesh');
  const multiresInfo = a.multires ? await getJson(layerUrl(a.multires) + '/info') : null;
  let annInfo = null;
  if (a.annotations) annInfo = await getJson(layerUrl(a.annotations) + '/info');

  const width = 1024, height = 768;
  const extent = Math.max(...s0.size);
  const state = {
    dimensions: { x: [s0.resolution[0] * 1e-9, 'm'],
                  y: [s0.resolution[1] * 1e-9, 'm'],
                  z: [s0.resolution[2] * 1e-9, 'm'] },
    position: [0, 1, 2].map((k) => s0.voxel_offset[k] + s0.size[k] / 2),
    crossSectionScale: extent * 1.1 / (height / 2),
    projectionScale: extent * 1.5,
    projectionOrientation: [0.3, -0.3, 0, 0.9],
    layers: [
      { type: 'image', source: 'precomputed://' + layerUrl(a.image), name: 'image' },
      { type: 'segmentation', source: 'precomputed://' + layerUrl(a.segmentation),
        name: 'segmentation', segments: segments, selectedAlpha: 0.4 },
    ],
    layout: '4panel',
    // The 3-D panel shows the meshes alone: blank there means no mesh drawn.
    showSlices: false,
    showAxisLines: false,
    showDefaultAnnotations: false,
    selectedLayer: { visible: false },
  };
  if (a.multires) {
    state.layers.push({ type: 'segmentation', name: 'multires',
                        source: 'precomputed://' + layerUrl(a.multires),
                        segments: segments });
  }
  if (a.annotations) {
    const rels = annInfo.relationships.map((r) => r.id);
    const link = {};
    for (const r of rels) link[r] = 'segmentation';
    state.layers.push({ type: 'annotation', name: 'synapses',
                        source: 'precomputed://' + layerUrl(a.annotations),
                        linkedSegmentationLayer: link,
                        filterBySegmentation: rels });
  }
  const url = a.ng + '#!' + encodeURIComponent(JSON.stringify(state));

  // A segment with no synapse in a relationship has no chunk in that
  // relationship's unsharded index: Neuroglancer reads the 404 as "none"
  // (and 2.37.5 refuses an empty, 8-byte chunk: "Expected at least 8
  // bytes"). Those URLs alone may answer 404 (and the browser's console
  // line about it is not an error of ours); any other 404 fails.
  const absentOk = new Set();
  if (a.annotations)
    for (const id of segments)
      for (const rel of annInfo.relationships)
        if (((expect.synapses[id] || {})[rel.id] || [null]).length === 0)
          absentOk.add(`${layerUrl(a.annotations)}/${rel.key}/${id}`);
  const problems = [];
  const responses = new Map(); // url -> {status, body?}
  const pending = [];
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update',
           '--disable-sync', '--use-angle=swiftshader',
           '--enable-unsafe-swiftshader', '--ignore-gpu-blocklist'],
  });
  let result;
  const lodsSeen = {}; // segment -> multi-resolution levels of detail loaded
  try {
    const page = await browser.newPage({ viewport: { width, height } });
    page.on('pageerror', (e) => problems.push('page error: ' + String(e)));
    const onConsole = (m) => {
      // A chunk that fails to download or decode: Neuroglancer's chunk
      // worker says so with console.log (chunk_manager/backend.ts).
      if (m.type() === 'error' || /^Error retrieving chunk/.test(m.text())) {
        const loc = m.location();
        if (loc && absentOk.has(loc.url) && / 404 /.test(m.text())) return;
        problems.push('console error: ' + m.text() +
                      (loc && loc.url ? ' (' + loc.url + ')' : ''));
      }
    };
    // (Playwright passes the chunk worker's console on to the page's.)
    page.on('console', onConsole);
    page.on('requestfailed', (r) => {
      const why = r.failure() ? r.failure().errorText : '?';
      // Neuroglancer cancels chunk requests it no longer needs.
      if (why === 'net::ERR_ABORTED') return;
      problems.push(`request failed: ${r.method()} ${r.url()}: ${why}`);
    });
    let lastResponse = Date.now();
    page.on('response', (r) => {
      const u = r.url();
      lastResponse = Date.now();
      const rec = { status: r.status() };
      responses.set(u, rec);
      if (r.status() >= 400 && !(r.status() === 404 && absentOk.has(u)))
        problems.push(`HTTP ${r.status()}: ${r.request().method()} ${u}`);
      else if (u.startsWith(a.data) && r.request().method() === 'GET')
        pending.push(r.body().then((b) => { rec.body = b; }, () => {}));
    });
    await page.goto(url, { waitUntil: 'load', timeout: 60000 });
    const gl = await page.evaluate(() =>
      !!document.createElement('canvas').getContext('webgl2'));
    if (!gl) throw new Error('no WebGL2 in this Chromium (Neuroglancer needs it)');

    const done = (r) => {
      if (!r.ready) return false;
      for (const l of Object.values(r.layers))
        for (const m of l.meshes)
          for (const s of Object.values(m.segments))
            if (s.manifest === null || s.inGpu === 0 || s.inGpu < s.fragments) return false;
      if (a.annotations) {
        const ann = r.layers.synapses && r.layers.synapses.annotations[0];
        if (!ann) return false;
        for (const id of segments)
          if (ann.segments[id].some((c) => c === null || c.state > 1)) return false;
      }
      return true;
    };
    const t0 = Date.now();
    let good = 0;
    // Until loaded, or 120 s, or (once something failed) 5 s without a
    // response: a failed load is reported without the full wait.
    while (good < 2 && Date.now() - t0 < 120000 &&
           !(problems.length && Date.now() - lastResponse > 5000)) {
      await page.waitForTimeout(500);
      result = await page.evaluate(inspectPage, segments);
      good = done(result) ? good + 1 : 0;
    }
    if (good < 2)
      problems.push(`not everything loaded after ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    // Multi-resolution meshes: the view above loads the coarser levels of
    // detail; then the finest everywhere (the layer's mesh render scale at
    // 0.01 pixel), so that every level a segment has is loaded once. The
    // levels loaded in either view count.
    const noteLods = (r) => {
      const mm = r && r.layers.multires && r.layers.multires.meshes.find((m) => m.multiscale);
      if (!mm) return;
      for (const [id, s] of Object.entries(mm.segments))
        lodsSeen[id] = [...new Set([...(lodsSeen[id] || []), ...s.lods])].sort((x, y) => x - y);
    };
    noteLods(result);
    if (a.multires && !problems.length) {
      await page.evaluate(() => {
        for (const ml of window.viewer.layerManager.managedLayers)
          if (ml.name === 'multires') ml.layer.displayState.renderScaleTarget.value = 0.01;
      });
      const t1 = Date.now();
      good = 0;
      while (good < 2 && Date.now() - t1 < 60000 &&
             !(problems.length && Date.now() - lastResponse > 5000)) {
        await page.waitForTimeout(500);
        result = await page.evaluate(inspectPage, segments);
        good = done(result) ? good + 1 : 0;
      }
      noteLods(result);
      if (good < 2)
        problems.push(`multi-resolution meshes at the finest level: not everything loaded after ` +
                      `${((Date.now() - t1) / 1000).toFixed(1)} s`);
      // Back to the first view for the screenshots.
      await page.evaluate(() => {
        for (const ml of window.viewer.layerManager.managedLayers)
          if (ml.name === 'multires') ml.layer.displayState.renderScaleTarget.value = 1;
      });
      for (let n = 0; n < 60 && !(await page.evaluate(() => window.viewer.display.isReady())); n++)
        await page.waitForTimeout(500);
    }
    console.log(`ng_browser_check: ${good >= 2 ? "loaded" : "NOT loaded"} after ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    await page.waitForTimeout(500);
    await Promise.all(pending);

    // Screenshots: the whole viewer and each rendered panel.
    fs.mkdirSync(a.out, { recursive: true });
    const whole = path.join(a.out, 'ng-4panel.png');
    await page.screenshot({ path: whole });
    const rects = await page.$$eval('.neuroglancer-rendered-data-panel', (els) =>
      els.map((e) => { const b = e.getBoundingClientRect();
                       return { x: b.x, y: b.y, width: b.width, height: b.height }; })
         .filter((b) => b.width > 0 && b.height > 0));
    if (rects.length !== 4) problems.push(`want 4 panels, found ${rects.length}`);
    const shots = [whole];
    for (let i = 0; i < rects.length; i++) {
      const p = path.join(a.out, `panel-${i}.png`);
      await page.screenshot({ path: p, clip: rects[i] });
      shots.push(p);
    }
    fs.writeFileSync(path.join(a.out, 'state.json'), JSON.stringify(state, null, 1));
    fs.writeFileSync(path.join(a.out, 'page.json'), JSON.stringify(result, null, 1));
    for (const p of shots) console.log('ng_browser_check: screenshot ' + p);
  } finally {
    await browser.close();
  }

  // Per selected segment: the network and the page.
  const ok = (u) => responses.has(u) && responses.get(u).status < 400;
  const lines = [];
  const segLayer = result && result.layers.segmentation;
  for (const id of segments) {
    // Legacy meshes: the manifest and every fragment it lists.
    const mu = `${meshDir}/${id}:0`;
    let frags = [];
    if (!ok(mu)) {
      problems.push(`segment ${id}: legacy mesh manifest ${mu} not fetched with success`);
    } else {
      try {
        frags = JSON.parse(responses.get(mu).body.toString()).fragments;
      } catch (e) {
        problems.push(`segment ${id}: ${mu}: ${e.message}`);
      }
      if (!frags.length) problems.push(`segment ${id}: ${mu} lists no fragment`);
      for (const f of frags)
        if (!ok(`${meshDir}/${f}`))
          problems.push(`segment ${id}: mesh fragment ${meshDir}/${f} not fetched with success`);
    }
    const legacy = segLayer && segLayer.meshes.find((m) => !m.multiscale);
    const ls = legacy && legacy.segments[id];
    if (!ls || ls.manifest === null)
      problems.push(`segment ${id}: Neuroglancer holds no legacy mesh manifest for it`);
    else if (ls.inGpu < ls.fragments || ls.fragments !== frags.length)
      problems.push(`segment ${id}: ${ls.inGpu} of ${ls.fragments} legacy fragments drawn ` +
                    `(${frags.length} in the manifest; chunk states of the others ` +
                    `${JSON.stringify(ls.states)}, null: none)`);
    let line = `segment ${id}: legacy mesh ${ls ? ls.inGpu : 0}/${frags.length} fragments`;

    if (a.multires) {
      const ml = result && result.layers.multires;
      const mm = ml && ml.meshes.find((m) => m.multiscale);
      const ms = mm && mm.segments[id];
      // Unsharded: <id>.index and byte ranges of <id> (sharded: ranges of
      // shard files, which the HTTP and in-page checks cover).
      // The levels of detail that hold data: from the manifest's bytes
      // (the spec's layout) when it was fetched unsharded, else from
      // Neuroglancer's parsed manifest (levels with a scale).
      let levels = ms && ms.numLods !== undefined ? [...Array(ms.numLods).keys()] : [];
      if (!multiresInfo.sharding) {
        const iu = `${layerUrl(a.multires)}/${id}.index`;
        if (!ok(iu)) problems.push(`segment ${id}: multi-resolution manifest ${iu} not fetched with success`);
        else {
          try {
            levels = multiresLevels(responses.get(iu).body);
          } catch (e) {
            problems.push(`segment ${id}: ${iu}: ${e.message}`);
          }
        }
        if (!ok(`${layerUrl(a.multires)}/${id}`))
          problems.push(`segment ${id}: multi-resolution fragments ${layerUrl(a.multires)}/${id} not fetched with success`);
      }
      if (!ms || ms.manifest === null)
        problems.push(`segment ${id}: Neuroglancer holds no multi-resolution manifest for it`);
      else if (ms.inGpu === 0 || ms.inGpu < ms.fragments)
        problems.push(`segment ${id}: ${ms.inGpu} of ${ms.fragments} multi-resolution fragments loaded (chunk states of the others ${JSON.stringify(ms.states)})`);
      const seen = lodsSeen[id] || [];
      const missing = levels.filter((l) => !seen.includes(l));
      if (missing.length)
        problems.push(`segment ${id}: multi-resolution levels of detail [${missing}] never loaded ` +
                      `(loaded: [${seen}])`);
      line += `; multi-resolution: levels of detail [${seen}] of [${levels}] loaded`;
    }

    if (a.annotations) {
      const ann = result && result.layers.synapses && result.layers.synapses.annotations[0];
      for (const [ri, rel] of annInfo.relationships.entries()) {
        const want = (expect.synapses[id] || {})[rel.id];
        if (!want) {
          problems.push(`segment ${id}: no expected synapses for relationship ${rel.id} ` +
                        '(REL_FIELDS in browser_test.sh names the relationships)');
          continue;
        }
        const u = `${layerUrl(a.annotations)}/${rel.key}/${id}`;
        const absent = absentOk.has(u) && responses.has(u) && responses.get(u).status === 404;
        const body = ok(u) ? responses.get(u).body : absent ? Buffer.alloc(8) : null;
        if (!body) {
          problems.push(`segment ${id}: relationship index ${u} not fetched with success`);
          continue;
        }
        const n = body.length >= 8 ? Number(body.readBigUInt64LE(0)) : -1;
        const got = [];
        for (let k = 0; n > 0 && body.length >= 8 + 8 * n && k < n; k++)
          got.push(body.readBigUInt64LE(body.length - 8 * (n - k)).toString());
        const wantS = want.map(String);
        const same = got.length === wantS.length &&
          [...got].sort().every((x, k) => x === [...wantS].sort()[k]);
        if (!same)
          problems.push(`segment ${id}: ${u} holds ${n} annotations (ids ${got.slice(0, 5)}...), ` +
                        `the tables give ${want.length} (${wantS.slice(0, 5)}...)`);
        const c = ann && ann.segments[id] && ann.segments[id][ri];
        if (!c || c.state > 1)
          problems.push(`segment ${id}: Neuroglancer holds no ${rel.id} annotations for it`);
        line += `; ${rel.id}: ${got.length}/${want.length} synapses`;
      }
    }
    lines.push(line);
  }
  const data = [...responses.entries()].filter(([u]) => u.startsWith(a.data));
  const absent = data.filter(([u, r]) => r.status === 404 && absentOk.has(u)).length;
  console.log(`ng_browser_check: ${data.length} layer requests, ` +
              `${data.filter(([, r]) => r.status >= 400).length - absent} failed` +
              (absent ? `, ${absent} relationship index chunks absent as expected (no synapse)` : ''));
  for (const l of lines) console.log('ng_browser_check: ' + l);
  if (problems.length) {
    for (const p of problems) console.log('ng_browser_check: FAILED: ' + p);
    process.exit(1);
  }
  console.log('ng_browser_check: all checks passed');
}

main().catch((e) => {
  console.log('ng_browser_check: FAILED: ' + (e && e.message ? e.message : e));
  process.exit(1);
});
