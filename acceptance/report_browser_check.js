// report_browser_check.js - a cnx-report page in headless Chromium.
//
//   NODE_PATH=<dir with playwright-core> node report_browser_check.js \
//     PAGE.html SHOT.png > rows.json
//
// Opens PAGE.html (file://) in Debian's chromium (launched as
// ng_browser_check.js does), takes a screenshot of the whole page to
// SHOT.png, and prints what the browser drew of the timeline as JSON:
// {"rows": [{"stage", "width", "height", "bars", "bars_drawn"}], "problems"}
// where width/height are the row's rendered box and bars_drawn counts the
// bars with a non-empty rendered box. Any page error, console error or
// request to another origin (the page must need nothing) is a problem.
// Exit 0 when the page loaded (the caller judges the rows), 1 otherwise.
'use strict';
const { chromium } = require('playwright-core');
const path = require('path');

(async () => {
  const [page_path, shot] = process.argv.slice(2);
  if (!page_path || !shot) {
    console.error('usage: report_browser_check.js PAGE.html SHOT.png');
    process.exit(2);
  }
  const url = 'file://' + path.resolve(page_path);
  const problems = [];
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--no-first-run',
           '--disable-background-networking', '--disable-component-update',
           '--disable-sync'],
  });
  let out = null;
  try {
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    page.on('pageerror', (e) => problems.push('page error: ' + String(e)));
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push('console error: ' + m.text());
    });
    page.on('request', (r) => {
      if (!r.url().startsWith('file://')) problems.push('fetched ' + r.url());
    });
    await page.goto(url, { waitUntil: 'load', timeout: 30000 });
    await page.screenshot({ path: shot, fullPage: true });
    const rows = await page.evaluate(() =>
      Array.from(document.querySelectorAll('#timeline-svg g.stage-row')).map((g) => {
        const r = g.getBoundingClientRect();
        const bars = Array.from(g.querySelectorAll('rect.bar'));
        return {
          stage: g.getAttribute('data-stage'),
          width: r.width, height: r.height,
          bars: bars.length,
          bars_drawn: bars.filter((b) => {
            const x = b.getBoundingClientRect();
            return x.width > 0 && x.height > 0 && getComputedStyle(b).fill !== 'none';
          }).length,
        };
      }));
    out = { rows, problems };
  } catch (e) {
    problems.push(String(e));
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out || { rows: [], problems }));
  process.exit(out ? 0 : 1);
})();
