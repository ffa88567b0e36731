// cordon kernel driver for JavaScript. driver.py starts it as
//
//     node --expose-internals -e "<this file>" REQ_FD FRAME_FD
//
// with fd 0 = /dev/null and fds 1/2 = the pipes driver.py turns into stream messages.
// REQ_FD carries requests from driver.py ({"id", "op": "execute", "code", "count"} per line);
// FRAME_FD carries this side's frames back (ready / result / error / done, one JSON per line;
// driver.py adds ids and execution counts). Neither is stdin/stdout, so user code reading
// process.stdin or printing anything cannot disturb them.
//
// All cells run in ONE persistent context: node's main context (so objects from `require`d
// modules and from cells share one realm and `instanceof` works). Each cell is rewritten, with
// the acorn parser node ships (reachable with --expose-internals), like the node REPL does for
// top-level await, but always:
//   - the cell becomes the body of an async arrow function, so top-level `await` works;
//   - top-level let/const/class/function/var become global `var`s, so they persist and a cell
//     can be run again without "Identifier 'x' has already been declared";
//   - a trailing expression statement is returned: it is the main result;
//   - static `import x from 'm'` becomes `const x = (await import('m')).default` (and so on).
// Without acorn (or for code acorn cannot parse but V8 can) the cell runs as a plain script.
//
// SIGINT: synchronous code is stopped (vm breakOnSigint); a pending top-level await is
// abandoned; both report an error named KeyboardInterrupt and keep the context.
(function cordonNodeDriver() {
  'use strict';
  const vm = require('vm');
  const util = require('util');
  const fs = require('fs');
  const net = require('net');

  const REQ_FD = Number(process.argv[1]);
  const FRAME_FD = Number(process.argv[2]);
  // FIFOs that driver.py reads as stdout/stderr too: node cannot dup2, so if a cell closes or
  // replaces fd 1 or 2, reopening one of these lands on the freed descriptor.
  const FIFO = { 1: process.argv[3] || '', 2: process.argv[4] || '' };
  process.argv.splice(1, FIFO[1] ? 4 : 2);
  const stringify = JSON.stringify;
  const parseJSON = JSON.parse;

  let acorn = null;
  let walk = null;
  try {
    acorn = require('internal/deps/acorn/acorn/dist/acorn');
    walk = require('internal/deps/acorn/acorn-walk/dist/walk');
  } catch (e) {
    acorn = walk = null;
  }

  // Make console output synchronous, so it is in the pipe before any frame that follows it.
  for (const s of [process.stdout, process.stderr]) {
    try {
      if (s._handle && typeof s._handle.setBlocking === 'function') s._handle.setBlocking(true);
    } catch (e) { /* best effort */ }
  }

  function send(obj) {
    let line;
    try {
      line = stringify(obj);
    } catch (e) {
      line = stringify({ id: obj.id, type: 'error', name: 'DriverError', value: String(e), traceback: [] });
    }
    const buf = Buffer.from(line + '\n', 'utf8');
    let off = 0;
    while (off < buf.length) {
      try {
        off += fs.writeSync(FRAME_FD, buf, off, buf.length - off);
      } catch (e) {
        if (e.code === 'EAGAIN') continue;
        process.exit(0); // driver.py went away
      }
    }
  }

  // ------------------------------------------------------------------------------------------
  // Rewriting a cell

  const WRAP_PREFIX = '(async () => {\n';
  const WRAP_SUFFIX = '\n})()';
  let importCounter = 0;

  function isTopLevel(state) {
    return state.ancestors[state.ancestors.length - 2] === state.body;
  }

  function collectNames(node, out) {
    if (!node) return;
    switch (node.type) {
      case 'Identifier': out.push(node.name); break;
      case 'ObjectPattern':
        for (const p of node.properties) collectNames(p.type === 'RestElement' ? p.argument : p.value, out);
        break;
      case 'ArrayPattern': for (const el of node.elements) collectNames(el, out); break;
      case 'AssignmentPattern': collectNames(node.left, out); break;
      case 'RestElement': collectNames(node.argument, out); break;
    }
  }

  const noop = () => {};
  const ownVisitors = {
    ClassDeclaration(node, state, c) {
      if (isTopLevel(state)) {
        state.prepend(node, `${node.id.name}=`);
        state.append(node, ';');
        state.hoisted.push(node.id.name);
      }
      walk.base.ClassDeclaration(node, state, c);
    },
    FunctionDeclaration(node, state) {
      state.prepend(node, `this.${node.id.name} = ${node.id.name}; `);
      state.hoisted.push(node.id.name);
    },
    FunctionExpression: noop,
    ArrowFunctionExpression: noop,
    MethodDefinition: noop,
    StaticBlock: noop,
    ReturnStatement(node, state, c) {
      state.containsReturn = true;
      walk.base.ReturnStatement(node, state, c);
    },
    VariableDeclaration(node, state, c) {
      const kind = node.kind;
      const parentType = state.ancestors[state.ancestors.length - 2].type;
      const inForInOf = parentType === 'ForOfStatement' || parentType === 'ForInStatement';
      if (kind === 'var' || isTopLevel(state)) {
        state.replace(
          node.start,
          node.start + kind.length + (inForInOf ? 1 : 0),
          kind === 'var' && inForInOf ? '' : 'void' + (node.declarations.length === 1 ? '' : ' ('),
        );
        if (!inForInOf) {
          for (const decl of node.declarations) {
            state.prepend(decl, '(');
            state.append(decl, decl.init ? ')' : '=undefined)');
          }
          if (node.declarations.length !== 1) state.append(node.declarations[node.declarations.length - 1], ')');
        }
        for (const decl of node.declarations) collectNames(decl.id, state.hoisted);
      }
      walk.base.VariableDeclaration(node, state, c);
    },
  };
  let visitors = null;
  function getVisitors() {
    if (visitors) return visitors;
    visitors = {};
    for (const type of Object.keys(walk.base)) {
      const cb = ownVisitors[type] || walk.base[type];
      visitors[type] = (node, state, c) => {
        const isNew = node !== state.ancestors[state.ancestors.length - 1];
        if (isNew) state.ancestors.push(node);
        cb(node, state, c);
        if (isNew) state.ancestors.pop();
      };
    }
    return visitors;
  }

  // Returns the rewritten source (to compile with lineOffset -1), or null to run `src` as is.
  function transform(src) {
    const wrapped = WRAP_PREFIX + src + WRAP_SUFFIX;
    const root = acorn.Parser.parse(wrapped, { ecmaVersion: 'latest' });
    const body = root.body[0].expression.callee.body;
    const chars = wrapped.split('');
    const state = {
      body,
      ancestors: [],
      hoisted: [],
      containsReturn: false,
      replace(from, to, str) {
        for (let i = from; i < to; i++) chars[i] = '';
        if (from === to) str += chars[from];
        chars[from] = str;
      },
      prepend(node, str) { chars[node.start] = str + chars[node.start]; },
      append(node, str) { chars[node.end - 1] += str; },
    };
    walk.recursive(body, state, getVisitors());
    if (state.containsReturn) return null; // a top-level `return`: let V8 report it
    for (let i = body.body.length - 1; i >= 0; i--) {
      const node = body.body[i];
      if (node.type === 'EmptyStatement') continue;
      if (node.type === 'ExpressionStatement') {
        state.prepend(node.expression, '{ value: (');
        state.prepend(node, 'return ');
        state.append(node.expression, ') }');
      }
      break;
    }
    const names = [...new Set(state.hoisted)];
    return (names.length ? `var ${names.join(', ')}; ` : '') + chars.join('');
  }

  // Static imports -> dynamic import(); null when there are none (or the code is not a module).
  function rewriteImports(src) {
    if (!/\bimport\b/.test(src)) return null;
    let root;
    try {
      root = acorn.Parser.parse(src, {
        ecmaVersion: 'latest', sourceType: 'module',
        allowAwaitOutsideFunction: true, allowReturnOutsideFunction: true, allowHashBang: true,
      });
    } catch (e) {
      return null;
    }
    const edits = [];
    for (const node of root.body) {
      if (node.type !== 'ImportDeclaration') continue;
      const tmp = `__cordon_import${importCounter++}`;
      const parts = [`const ${tmp} = await import(${src.slice(node.source.start, node.source.end)});`];
      for (const s of node.specifiers) {
        if (s.type === 'ImportDefaultSpecifier') {
          parts.push(`const ${s.local.name} = ${tmp}.default;`);
        } else if (s.type === 'ImportNamespaceSpecifier') {
          parts.push(`const ${s.local.name} = ${tmp};`);
        } else {
          const name = s.imported.type === 'Identifier' ? s.imported.name : s.imported.value;
          parts.push(`const ${s.local.name} = ${tmp}[${stringify(name)}];`);
        }
      }
      edits.push([node.start, node.end, parts.join(' ')]);
    }
    if (!edits.length) return null;
    let out = src;
    for (let i = edits.length - 1; i >= 0; i--) {
      const [a, b, text] = edits[i];
      out = out.slice(0, a) + text + out.slice(b);
    }
    return out;
  }

  function isObjectLiteral(src) {
    if (!/^\s*\{/.test(src) || !/\}\s*;?\s*$/.test(src)) return false;
    try {
      acorn.Parser.parse(`(${src.replace(/;\s*$/, '')}\n)`, { ecmaVersion: 'latest' });
      return true;
    } catch (e) {
      return false;
    }
  }

  // import() in cells uses node's default loader (relative to the cwd). node 20 calls that
  // "experimental" and warns on first use: that one warning is filtered out.
  const dynamicImport = vm.constants && vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER;
  if (dynamicImport) {
    const emitWarning = process.emitWarning;
    process.emitWarning = function (warning, ...rest) {
      const text = String(warning && warning.message !== undefined ? warning.message : warning);
      if (text.includes('USE_MAIN_CONTEXT_DEFAULT_LOADER')) return undefined;
      return emitWarning.call(this, warning, ...rest);
    };
  }

  function compile(code, filename) {
    const opts = dynamicImport ? { filename, importModuleDynamically: dynamicImport } : { filename };
    let acornError = null;
    if (acorn && walk) {
      let src = code;
      if (isObjectLiteral(src)) src = `(${src.replace(/;\s*$/, '')}\n)`;
      let t = null;
      try {
        t = transform(src);
      } catch (e) {
        acornError = e;
        const rewritten = rewriteImports(src);
        if (rewritten !== null) {
          try {
            t = transform(rewritten);
            acornError = null;
          } catch (e2) { /* keep the first error */ }
        }
      }
      if (t !== null) {
        try {
          return { script: new vm.Script(t, { ...opts, lineOffset: -1 }), wrapped: true };
        } catch (e) { /* fall back to the plain script */ }
      }
    }
    try {
      return { script: new vm.Script(code, opts), wrapped: false };
    } catch (e) {
      if (acornError && acornError.loc && /\bawait\b/.test(String(e.message))) {
        // V8 only objects to the await; acorn saw the real problem.
        const msg = String(acornError.message).replace(/\s*\(\d+:\d+\)$/, '');
        const err = new SyntaxError(`${msg} (${acornError.loc.line - 1}:${acornError.loc.column})`);
        err.stack = `${filename}:${acornError.loc.line - 1}\nSyntaxError: ${err.message}`;
        throw err;
      }
      throw e;
    }
  }

  // ------------------------------------------------------------------------------------------
  // Results and errors

  const MIME_METHODS = [
    ['_repr_html_', 'text/html'],
    ['_repr_markdown_', 'text/markdown'],
    ['_repr_svg_', 'image/svg+xml'],
    ['_repr_png_', 'image/png'],
    ['_repr_jpeg_', 'image/jpeg'],
    ['_repr_json_', 'application/json'],
    ['_repr_latex_', 'text/latex'],
  ];
  const BINARY = new Set(['image/png', 'image/jpeg', 'image/gif', 'application/pdf']);

  function inspect(v) {
    try {
      return util.inspect(v, { depth: 4, maxArrayLength: 200, breakLength: 100 });
    } catch (e) {
      return `<inspect failed: ${e && e.message}>`;
    }
  }

  function warn(msg) {
    try { process.stderr.write(`[cordon] ${msg}\n`); } catch (e) { /* ignore */ }
  }

  function coerce(mime, v) {
    if (v === undefined || v === null || typeof v.then === 'function') return undefined;
    if (BINARY.has(mime)) {
      if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64');
      return typeof v === 'string' ? v : undefined;
    }
    if (mime === 'application/json' || mime.endsWith('+json')) {
      try {
        return typeof v === 'string' ? parseJSON(v) : parseJSON(stringify(v));
      } catch (e) {
        return undefined;
      }
    }
    if (v instanceof Uint8Array) return Buffer.from(v).toString('utf8');
    return typeof v === 'string' ? v : undefined;
  }

  function bundle(value) {
    const data = {};
    if (value !== null && typeof value === 'object') {
      let claimsAll = true;
      try { claimsAll = value._cordon_canary_method_should_not_exist_ !== undefined; } catch (e) { /* proxy */ }
      if (!claimsAll) {
        let f;
        try { f = value._repr_mimebundle_; } catch (e) { f = undefined; }
        if (typeof f === 'function') {
          try {
            const r = f.call(value);
            if (r && typeof r === 'object') {
              for (const mime of Object.keys(r)) {
                const v = coerce(mime, r[mime]);
                if (v !== undefined) data[mime] = v;
              }
            }
          } catch (e) {
            warn(`_repr_mimebundle_() failed: ${e && e.message}`);
          }
        }
        for (const [meth, mime] of MIME_METHODS) {
          if (mime in data) continue;
          try { f = value[meth]; } catch (e) { continue; }
          if (typeof f !== 'function') continue;
          try {
            const v = coerce(mime, f.call(value));
            if (v !== undefined) data[mime] = v;
          } catch (e) {
            warn(`${meth}() failed: ${e && e.message}`);
          }
        }
      }
    }
    if (typeof data['text/plain'] !== 'string') {
      data['text/plain'] = plainStr && typeof value === 'string' ? value : inspect(value);
    }
    return data;
  }

  let current = null; // id of the running cell
  // This cell shows a string result as itself (E2B), not quoted as inspect() does.
  let plainStr = false;

  Object.defineProperty(globalThis, 'display', {
    value: function display(...objs) {
      for (const o of objs) {
        if (current === null) return;
        send({ id: current, type: 'result', is_main_result: false, data: bundle(o) });
      }
    },
    writable: true,
    configurable: true,
    enumerable: false,
  });

  const HIDDEN_FRAME = /\[eval\]|\(node:vm:|\(node:internal\/(vm|process\/|main\/|modules\/run_main|timers)/;

  function isInterrupt(e) {
    return e === INTERRUPTED || (e !== null && typeof e === 'object' && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED');
  }
  const INTERRUPTED = Symbol('interrupted');

  function errorFrame(id, e, compiling) {
    if (isInterrupt(e)) {
      return { id, type: 'error', name: 'KeyboardInterrupt', value: 'Script execution was interrupted by SIGINT', traceback: [] };
    }
    let errorLike = false;
    let name = 'Uncaught';
    let value = '';
    let stack = '';
    if (e !== null && (typeof e === 'object' || typeof e === 'function')) {
      try {
        errorLike = typeof e.message === 'string' || typeof e.stack === 'string';
        if (errorLike) {
          name = e.name === undefined ? 'Error' : String(e.name);
          value = e.message === undefined ? '' : String(e.message);
          stack = typeof e.stack === 'string' ? e.stack : `${name}: ${value}`;
        }
      } catch (err) {
        errorLike = false;
      }
    }
    if (!errorLike) {
      value = inspect(e);
      stack = `Uncaught ${value}`;
    }
    let lines = stack.split('\n');
    // Frames below the outermost cell frame are the driver's own call stack.
    let last = -1;
    lines.forEach((l, i) => { if (/^\s+at .*<cell-\d+>/.test(l)) last = i; });
    if (last >= 0) lines = lines.slice(0, last + 1);
    if (compiling) lines = lines.filter((l) => !/^\s+at /.test(l)); // a syntax error: no frames
    const traceback = lines.filter((l) => !(/^\s+at /.test(l) && HIDDEN_FRAME.test(l)));
    return { id, type: 'error', name, value, traceback };
  }

  // ------------------------------------------------------------------------------------------
  // Running cells

  let onInterrupt = null;
  process.on('SIGINT', () => {
    const f = onInterrupt;
    if (f) f(); // idle: ignored
  });
  process.on('uncaughtException', (e) => {
    const f = errorFrame(null, e);
    warn(`uncaught exception (in a callback):\n${f.traceback.join('\n')}`);
  });
  process.on('unhandledRejection', (e) => {
    const f = errorFrame(null, e);
    warn(`unhandled promise rejection:\n${f.traceback.join('\n')}`);
  });

  function interruptible(p) {
    return new Promise((resolve, reject) => {
      onInterrupt = () => reject(INTERRUPTED);
      Promise.resolve(p).then(resolve, reject);
    }).finally(() => { onInterrupt = null; });
  }

  function flushStream(s) {
    return new Promise((resolve) => {
      try {
        if (!s.writableLength) return resolve();
        s.write('', () => resolve());
      } catch (e) {
        resolve();
      }
    });
  }

  // ------------------------------------------------------------------------------------------
  // Keeping stdio usable across cells (python's driver restores fds 1/2 after each cell)

  const inode = (fd) => { try { return fs.fstatSync(fd).ino; } catch (e) { return null; } };
  const ORIGINAL = { 1: inode(1), 2: inode(2) };
  const FIFO_INO = {};
  for (const fd of [1, 2]) {
    try { FIFO_INO[fd] = FIFO[fd] ? fs.statSync(FIFO[fd]).ino : null; } catch (e) { FIFO_INO[fd] = null; }
  }

  // A synchronous stream on `fd`, standing in for an ended or broken process.stdout/stderr.
  function syncStream(fd) {
    const s = new (require('stream').Writable)({
      write(chunk, encoding, cb) {
        const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk, encoding);
        let off = 0;
        try {
          while (off < buf.length) {
            try {
              off += fs.writeSync(fd, buf, off, buf.length - off);
            } catch (e) {
              if (e.code !== 'EAGAIN') throw e;
            }
          }
          cb();
        } catch (e) {
          cb(e);
        }
      },
    });
    s.fd = fd;
    s.isTTY = false;
    s._isStdio = true;
    s.destroySoon = s.destroy;
    s._destroy = (err, cb) => cb(err); // never closes the descriptor
    return s;
  }

  function repairStdio() {
    if (inode(0) === null) {
      try { fs.openSync('/dev/null', 'r'); } catch (e) { /* lands on 0; best effort */ }
    }
    for (const fd of [1, 2]) {
      const name = fd === 1 ? 'stdout' : 'stderr';
      const ino = inode(fd);
      const intact = ino !== null && (ino === ORIGINAL[fd] || ino === FIFO_INO[fd]);
      if (!intact && FIFO[fd]) {
        // Lower descriptors are in use (0 was just checked, 1 before 2), so open() takes `fd`.
        if (ino !== null) { try { fs.closeSync(fd); } catch (e) { /* gone already */ } }
        let got = -1;
        try { got = fs.openSync(FIFO[fd], 'w'); } catch (e) { got = -1; }
        if (got !== fd) {
          if (got >= 0) { try { fs.closeSync(got); } catch (e) { /* ignore */ } }
          warn(`fd ${fd} was closed by a cell and could not be restored`);
          continue;
        }
      }
      const s = process[name];
      if (!intact || !s || s.destroyed || s.writableEnded) {
        const fresh = syncStream(fd);
        Object.defineProperty(process, name, { configurable: true, enumerable: true, get: () => fresh });
        try { console[`_${name}`] = fresh; } catch (e) { /* older node: console keeps its own */ }
      }
    }
  }

  let cells = 0;
  async function runCell(req) {
    const id = req.id;
    current = id;
    plainStr = req.plain_str === true;
    cells += 1;
    const filename = `<cell-${req.count || cells}>`;
    let status = 'ok';
    let compiling = true;
    // The cell's own variables: in process.env for it (and what it starts), the earlier
    // values back after it.
    const env = req.env && typeof req.env === 'object' ? req.env : {};
    const saved = new Map();
    for (const [k, v] of Object.entries(env)) {
      if (typeof v !== 'string') continue;
      saved.set(k, Object.prototype.hasOwnProperty.call(process.env, k) ? process.env[k] : undefined);
      process.env[k] = v;
    }
    try {
      const { script, wrapped } = compile(String(req.code), filename);
      compiling = false;
      let value = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
      if (wrapped) {
        const r = await interruptible(value);
        value = r !== null && typeof r === 'object' ? r.value : undefined;
      }
      if (value !== undefined) {
        send({ id, type: 'result', is_main_result: true, data: bundle(value) });
      }
    } catch (e) {
      status = 'error';
      send(errorFrame(id, e, compiling));
    } finally {
      for (const [k, v] of saved) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
    await flushStream(process.stdout);
    await flushStream(process.stderr);
    repairStdio();
    current = null;
    send({ id, type: 'done', status });
  }

  const queue = [];
  let running = false;
  async function drain() {
    if (running) return;
    running = true;
    while (queue.length) {
      let req;
      try {
        req = parseJSON(queue.shift());
      } catch (e) {
        continue;
      }
      if (req && req.op === 'execute') await runCell(req);
      else if (req && req.op === 'shutdown') process.exit(0);
    }
    running = false;
  }

  const requests = new net.Socket({ fd: REQ_FD, readable: true, writable: false });
  requests.setEncoding('utf8');
  let pending = '';
  requests.on('data', (chunk) => {
    pending += chunk;
    let i;
    while ((i = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, i);
      pending = pending.slice(i + 1);
      if (line.trim()) queue.push(line);
    }
    drain();
  });
  requests.on('end', () => process.exit(0));
  requests.on('error', () => process.exit(0));

  send({ type: 'ready', version: process.versions.node });
})();
