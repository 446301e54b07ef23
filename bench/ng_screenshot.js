// ng_screenshot.js - one Neuroglancer screenshot of a precomputed image
// layer in headless Chromium (driven by playwright-core), for
// bench/ng_screenshot.sh, which serves Neuroglancer and the dataset and
// says where playwright-core and Chromium are.
//
//   node ng_screenshot.js NG_URL LAYER_URL OUT.png [xz|xy|yz] [X,Y,Z|-]
//        [FIT]
//
// NG_URL: Neuroglancer's index.html (served); LAYER_URL: the layer, e.g.
// http://localhost:8123/data/aligned/v1 (opened as precomputed://...).
// The state shows the one cross-section panel, centred at X,Y,Z (voxels;
// default or "-": the middle of the layer as its info gives it), zoomed so
// that FIT voxels (default: the layer's larger extent in the panel) fill
// the 1024 x 1024 viewport. Waits until Neuroglancer says every visible
// chunk is drawn (viewer.display.isReady(); 180 s at most), then writes
// OUT.png. Exit 1 with a message on any failure.
'use strict';
const { chromium } = require('playwright-core');

async function main() {
  const [ngUrl, layerUrl, out, layout = 'xz', at, fit] =
    process.argv.slice(2);
  if (!ngUrl || !layerUrl || !out) {
    console.error('usage: node ng_screenshot.js NG_URL LAYER_URL OUT.png ' +
                  '[xz|xy|yz] [X,Y,Z|-] [FIT]');
    process.exit(2);
  }
  const info = await (await fetch(layerUrl + '/info')).json();
  const s = info.scales[0];
  const pos = at && at !== '-' ? at.split(',').map(Number)
                 : [0, 1, 2].map((k) => s.voxel_offset[k] + s.size[k] / 2);
  const side = 1024;
  // crossSectionScale: layer units (here voxels of scale 0) per screen
  // pixel; fit the larger extent the panel shows.
  const shown = fit ? Number(fit)
              : layout === 'xy' ? Math.max(s.size[0], s.size[1])
              : layout === 'xz' ? Math.max(s.size[0], s.size[2])
              : Math.max(s.size[1], s.size[2]);
  const state = {
    dimensions: {
      x: [s.resolution[0] * 1e-9, 'm'],
      y: [s.resolution[1] * 1e-9, 'm'],
      z: [s.resolution[2] * 1e-9, 'm'],
    },
    position: pos,
    crossSectionScale: (shown * 1.05) / side,
    layers: [{ type: 'image', source: 'precomputed://' + layerUrl,
               name: layerUrl.split('/').slice(-2).join('/') }],
    layout: layout,
    showAxisLines: false,
    showDefaultAnnotations: false,
    showScaleBar: true,
    selectedLayer: { visible: false },
  };
  const url = ngUrl + '#!' + encodeURIComponent(JSON.stringify(state));
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update',
           '--disable-sync', '--use-angle=swiftshader',
           '--enable-unsafe-swiftshader', '--ignore-gpu-blocklist'],
  });
  try {
    const page = await browser.newPage({ viewport: { width: side,
                                                     height: side } });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(m.text());
    });
    await page.goto(url, { waitUntil: 'networkidle', timeout: 120000 });
    const gl = await page.evaluate(() =>
      !!document.createElement('canvas').getContext('webgl2'));
    if (!gl)
      throw new Error('no WebGL2 in this Chromium (Neuroglancer needs it)');
    // Ready: every visible panel has drawn all the chunks it needs
    // (viewer.display.isReady(), what Neuroglancer's own screenshot tool
    // waits for), twice in a row; then a moment for the last frame.
    const t0 = Date.now();
    let ready = 0;
    while (ready < 2 && Date.now() - t0 < 180000) {
      await page.waitForTimeout(500);
      ready = (await page.evaluate(() => {
        const v = window.viewer;
        return !!(v && v.display && v.display.isReady());
      })) ? ready + 1 : 0;
    }
    if (ready < 2)
      errors.unshift('not ready after 180 s: the screenshot may be partial');
    await page.waitForTimeout(Number(process.env.NG_SETTLE_MS || 1000));
    await page.screenshot({ path: out });
    console.log('ng_screenshot: ' + out + ' (' + layout + ' at ' +
                pos.join(',') + ')' +
                (errors.length ? '; page errors: ' + errors.slice(0, 3)
                                                       .join(' | ') : ''));
  } finally {
    await browser.close();
  }
}

main().catch((e) => {
  console.error('ng_screenshot: ' + (e && e.message ? e.message : e));
  process.exit(1);
});
