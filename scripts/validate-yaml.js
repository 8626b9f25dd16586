#!/usr/bin/env node
// Checks every Kubernetes document of every YAML file under packaging/ (or of the files named)
// against the schema of its apiVersion/kind: the OpenAPI schemas of Kubernetes
// (npm kubernetes-models) and of the Prometheus operator's CRDs (@kubernetes-models/
// prometheus-operator), installed into tools/k8s-models by scripts/install-deps.sh.
//
//   scripts/validate-yaml.js [FILE...]     exit 0 if every document is valid, 1 otherwise
// Env: TIERFS_K8S_MODELS=DIR  where the npm modules are (default tools/k8s-models).
//
// Each problem is printed as FILE:DOCUMENT:PATH: MESSAGE (line N), DOCUMENT counting from 1 and
// PATH in the document's terms (spec.template.spec.containers[0].ports[0].containerPort).
// Besides the schema's types, enums, required fields and formats, a field the schema does not
// know is an error: Kubernetes drops unknown fields without a word (a typo'd `livenessProbe`
// is a pod without one), and the compiled schemas accept them. The validators are run on proxies
// of the document that record which fields each one looks up; a field of an object whose
// validator looked up its known fields by name, never enumerated its keys (a map such as labels
// does) and never asked for this one is unknown. An object whose schema looks at nothing (free
// form) is not judged.
"use strict";
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

const root = path.resolve(__dirname, "..");
const modulesDir = process.env.TIERFS_K8S_MODELS || path.join(root, "tools", "k8s-models");
const modulesRequire = createRequire(path.join(modulesDir, "package.json"));

function load(name) {
  try {
    return modulesRequire(name);
  } catch (e) {
    console.error(`validate-yaml: cannot load ${name} from ${modulesDir} (scripts/install-deps.sh ` +
                  `installs it): ${e.message.split("\n")[0]}`);
    process.exit(2);
  }
}
const YAML = load("yaml");

// The model class of an apiVersion/kind, or null: core/v1 is "v1/Kind", a group's
// "group/version/Kind"; the Prometheus operator's groups come from its own package.
function modelClass(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string") return null;
  if (!/^[A-Za-z0-9.]+(\/[A-Za-z0-9]+)?$/.test(apiVersion) || !/^[A-Za-z0-9]+$/.test(kind)) {
    return null;
  }
  const pkg = apiVersion.startsWith("monitoring.coreos.com/")
                  ? "@kubernetes-models/prometheus-operator"
                  : "kubernetes-models";
  try {
    return modulesRequire(`${pkg}/${apiVersion}/${kind}`)[kind] || null;
  } catch (e) {
    if (e.code === "MODULE_NOT_FOUND" && e.message.includes(`${apiVersion}/${kind}`)) return null;
    throw e;
  }
}

// A proxy of `value` (recursively) recording, per object, the fields looked up and whether its
// keys were enumerated. `nodes` collects [pointer, object, record] for every object reached.
function watch(value, pointer, nodes) {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) {
    const items = value.map((v, i) => watch(v, pointer.concat(i), nodes));
    return items;
  }
  const record = { read: new Set(), enumerated: false };
  nodes.push([pointer, value, record]);
  const children = {};
  for (const [k, v] of Object.entries(value)) children[k] = watch(v, pointer.concat(k), nodes);
  return new Proxy(children, {
    get(target, key, receiver) {
      if (typeof key === "string") record.read.add(key);
      return Reflect.get(target, key, receiver);
    },
    has(target, key) {
      if (typeof key === "string") record.read.add(key);
      return Reflect.has(target, key);
    },
    getOwnPropertyDescriptor(target, key) {
      if (typeof key === "string") record.read.add(key);
      return Reflect.getOwnPropertyDescriptor(target, key);
    },
    ownKeys(target) {
      record.enumerated = true;
      return Reflect.ownKeys(target);
    },
  });
}

// "spec.template.spec.containers[0].name" from ["spec", "template", ..., 0, "name"].
function dotted(pointer) {
  let s = "";
  for (const p of pointer) {
    if (typeof p === "number") s += `[${p}]`;
    else s += (s ? "." : "") + (/^[A-Za-z0-9_-]+$/.test(p) ? p : JSON.stringify(p));
  }
  return s || "(document)";
}

// The path segments of an ajv instancePath ("/spec/ports/0/port"), numbers for array indexes
// where the document has an array.
function segments(instancePath, data) {
  const out = [];
  let node = data;
  for (const raw of instancePath.split("/").slice(1)) {
    const key = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    const seg = Array.isArray(node) && /^\d+$/.test(key) ? Number(key) : key;
    out.push(seg);
    node = node != null && typeof node === "object" ? node[seg] : undefined;
  }
  return out;
}

// The problems of one document: [pointer, message].
function check(data) {
  if (data === null || typeof data !== "object" || Array.isArray(data)) {
    return [[[], "not a mapping (a Kubernetes object has apiVersion, kind, metadata)"]];
  }
  const Model = modelClass(data.apiVersion, data.kind);
  if (!Model) {
    return [[[], `no schema for apiVersion ${JSON.stringify(data.apiVersion)} kind ` +
                 `${JSON.stringify(data.kind)} (kubernetes-models, prometheus-operator)`]];
  }
  const nodes = [];
  const problems = [];
  try {
    Model.prototype.validate.call(watch(data, [], nodes));
  } catch (e) {
    if (!Array.isArray(e.errors)) throw e;
    for (const err of e.errors) {
      let msg = err.message || err.keyword;
      if (err.keyword === "enum" && err.params && err.params.allowedValues) {
        msg += ": " + err.params.allowedValues.map((v) => JSON.stringify(v)).join(", ");
      }
      if (err.keyword === "required" && err.params && err.params.missingProperty) {
        problems.push([segments(err.instancePath, data).concat(err.params.missingProperty),
                       "required field missing"]);
        continue;
      }
      problems.push([segments(err.instancePath, data), msg]);
    }
  }
  for (const [pointer, object, record] of nodes) {
    if (record.enumerated || record.read.size === 0) continue;
    for (const key of Object.keys(object)) {
      if (!record.read.has(key)) problems.push([pointer.concat(key), "unknown field"]);
    }
  }
  return problems;
}

// The YAML node of a field's key (where an editor should look), else of the value, else of the
// nearest enclosing node that exists.
function nodeAt(doc, pointer) {
  for (let n = pointer.length; n > 0; n--) {
    const parent = n > 1 ? doc.getIn(pointer.slice(0, n - 1), true) : doc.contents;
    if (parent && Array.isArray(parent.items)) {
      const last = pointer[n - 1];
      const item = typeof last === "number"
                       ? parent.items[last]
                       : parent.items.find((p) => p && p.key && p.key.value === last);
      if (item) return item.key && item.key.range ? item.key : item;
    }
  }
  return doc.contents;
}

function yamlFiles(dir) {
  const out = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...yamlFiles(p));
    else if (/\.ya?ml$/.test(entry.name)) out.push(p);
  }
  return out.sort();
}

function main(argv) {
  const files = argv.length ? argv : yamlFiles(path.join(root, "packaging"));
  if (!files.length) {
    console.error("validate-yaml: no YAML files");
    return 1;
  }
  let bad = 0;
  let total = 0;
  for (const file of files) {
    const rel = path.relative(process.cwd(), file);
    const shown = rel && !rel.startsWith("..") ? rel : file;
    const text = fs.readFileSync(file, "utf8");
    const lines = new YAML.LineCounter();
    const docs = YAML.parseAllDocuments(text, { lineCounter: lines, prettyErrors: false });
    const kinds = [];
    let fileBad = 0;
    docs.forEach((doc, i) => {
      const n = i + 1;
      const report = (pointer, msg) => {
        const node = nodeAt(doc, pointer);
        const at = node && node.range ? ` (line ${lines.linePos(node.range[0]).line})` : "";
        console.log(`${shown}:${n}:${dotted(pointer)}: ${msg}${at}`);
        fileBad++;
      };
      if (doc.errors.length) {
        for (const e of doc.errors) {
          console.log(`${shown}:${n}:(document): YAML: ${e.message.split("\n")[0]}` +
                      (e.linePos ? ` (line ${e.linePos[0].line})` : ""));
          fileBad++;
        }
        return;
      }
      const data = doc.toJS();
      if (data === null && doc.contents === null) return;  // an empty document (a trailing ---)
      for (const [pointer, msg] of check(data)) report(pointer, msg);
      kinds.push(data && data.kind);
      total++;
    });
    if (fileBad) bad += fileBad;
    else console.log(`ok ${shown}: ${kinds.length} documents (${kinds.join(", ")})`);
  }
  console.log(`validate-yaml: ${files.length} files, ${total} documents, ${bad} problems`);
  return bad ? 1 : 0;
}

process.exitCode = main(process.argv.slice(2));
