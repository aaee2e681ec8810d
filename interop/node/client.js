'use strict';
// Fetches a URL through a proxy with the npm agents rotor users run.
// Usage: node client.js socks|connect PROXY_URL TARGET_URL
// Prints "STATUS <code>" then the body; exits 0 on any HTTP answer, 1 on error.
const http = require('http');
const { SocksProxyAgent } = require('socks-proxy-agent');
const { HttpsProxyAgent } = require('https-proxy-agent');

const [mode, proxyURL, targetURL] = process.argv.slice(2);
if (!mode || !proxyURL || !targetURL) {
  console.error('usage: node client.js socks|connect PROXY_URL TARGET_URL');
  process.exit(2);
}
let agent;
if (mode === 'socks') {
  agent = new SocksProxyAgent(proxyURL);
} else if (mode === 'connect') {
  // HttpsProxyAgent always tunnels with CONNECT, also for http:// targets.
  agent = new HttpsProxyAgent(proxyURL);
} else {
  console.error('unknown mode ' + mode);
  process.exit(2);
}
const req = http.get(targetURL, { agent, timeout: 15000 }, (res) => {
  let body = '';
  res.setEncoding('utf8');
  res.on('data', (c) => { body += c; });
  res.on('end', () => {
    process.stdout.write('STATUS ' + res.statusCode + '\n' + body);
    process.exit(0);
  });
});
req.on('timeout', () => { req.destroy(new Error('timeout')); });
req.on('error', (e) => {
  console.error('ERROR ' + (e.code || '') + ' ' + e.message);
  process.exit(1);
});
