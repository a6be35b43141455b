// Offline checks of the Kubernetes manifests, three ways:
//  1. each object against its Kubernetes schema (kubernetes-models' validators);
//  2. unknown or misplaced fields, which those schemas allow: each object is
//     type-checked by TypeScript against the same models' interfaces, whose
//     excess-property check rejects a key the API does not have;
//  3. the fields gpubroker depends on (see checkGpubroker).
// Usage: node check-manifests.mjs OUT_DIR FILE...
// Writes OUT_DIR/gpubroker.yaml (the ConfigMap's daemon config) so that the
// caller can run gpubrokerd --check-config on it.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import YAML from "yaml";
import ts from "typescript";

const require = createRequire(import.meta.url);
const here = path.dirname(new URL(import.meta.url).pathname);
const [outDir, ...files] = process.argv.slice(2);
const errors = [];
const fail = (where, what) => errors.push(`${where}: ${what}`);

// apiVersion/kind -> module of kubernetes-models ("apps/v1/DaemonSet").
function modelPath(doc) {
  const [group, version] = doc.apiVersion.includes("/") ? doc.apiVersion.split("/") : ["", doc.apiVersion];
  return `kubernetes-models/${group ? `${group}/` : ""}${version}/${doc.kind}`;
}

const docs = [];
for (const file of files) {
  const parsed = YAML.parseAllDocuments(fs.readFileSync(file, "utf8"));
  parsed.forEach((d, i) => {
    if (d.errors.length) fail(`${file}#${i}`, d.errors.map((e) => e.message).join("; "));
    const doc = d.toJS();
    if (doc) docs.push({ where: `${path.basename(file)}#${i} ${doc.kind}/${doc.metadata?.name}`, doc });
  });
}

// 1. Schemas.
for (const { where, doc } of docs) {
  let Model;
  try {
    const mod = await import(modelPath(doc));
    Model = mod[doc.kind];
  } catch (e) {
    fail(where, `no schema for ${doc.apiVersion} ${doc.kind}`);
    continue;
  }
  try {
    new Model(doc).validate();
  } catch (e) {
    fail(where, `schema: ${e.message}`);
  }
}

// 2. Unknown fields.
{
  let source = "";
  docs.forEach(({ doc }, i) => {
    source += `import type { I${doc.kind} as T${i} } from "${modelPath(doc)}";\n`;
    source += `export const d${i}: T${i} = ${JSON.stringify(doc, null, 1)};\n`;
  });
  const file = path.join(here, ".manifests.check.ts");
  fs.writeFileSync(file, source);
  const program = ts.createProgram([file], {
    strict: true, noEmit: true, module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext, skipLibCheck: true, types: [],
  });
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const text = ts.flattenDiagnosticMessageText(d.messageText, "\n");
    const line = d.file ? d.file.getLineAndCharacterOfPosition(d.start).line : -1;
    // Map the diagnostic back to its document.
    const index = source.split("\n").slice(0, line + 1).filter((l) => l.startsWith("export const d")).length - 1;
    fail(docs[index]?.where ?? "types", text.split("\n").slice(-2).join(" "));
  }
  fs.rmSync(file);
}

// 3. What gpubroker relies on.
function find(kind, name) {
  return docs.map((d) => d.doc).find((d) => d.kind === kind && (!name || d.metadata.name === name));
}
function flag(args, name) {
  const a = (args ?? []).find((x) => x.startsWith(`--${name}=`));
  return a ? a.slice(name.length + 3) : undefined;
}
function checkGpubroker() {
  const ds = find("DaemonSet", "gpubroker");
  if (!ds) return fail("gpubroker", "no DaemonSet gpubroker");
  const pod = ds.spec.template.spec;
  const c = pod.containers.find((x) => x.name === "gpubrokerd");
  if (!c) return fail("DaemonSet", "no container gpubrokerd");
  const where = "DaemonSet/gpubroker";
  for (const x of [...pod.containers, ...(pod.initContainers ?? [])]) {
    for (const part of ["requests", "limits"]) {
      if (x.resources?.[part]?.["nvidia.com/gpu"] !== undefined) {
        fail(where, `${x.name} ${part} nvidia.com/gpu: the broker must not take a GPU from workloads`);
      }
    }
    if (!x.resources?.limits?.memory) fail(where, `${x.name} has no memory limit`);
  }
  if (pod.hostPID || pod.hostIPC || pod.hostNetwork) fail(where, "hostPID/hostIPC/hostNetwork");
  const env = Object.fromEntries((c.env ?? []).map((e) => [e.name, e.value]));
  if (env.NVIDIA_VISIBLE_DEVICES !== "all") fail(where, "NVIDIA_VISIBLE_DEVICES must be all");
  const socketDir = flag(c.args, "socket-dir");
  const metrics = flag(c.args, "metrics-address");
  const health = flag(c.args, "health-address");
  if (!socketDir || !metrics || !health) return fail(where, "needs --socket-dir, --metrics-address, --health-address");
  const portOf = (addr) => Number(addr.slice(addr.lastIndexOf(":") + 1));
  if (!metrics.startsWith("0.0.0.0:")) fail(where, "metrics must listen on the pod's address");
  const ports = Object.fromEntries((c.ports ?? []).map((p) => [p.name, p.containerPort]));
  if (ports.metrics !== portOf(metrics)) fail(where, `port metrics ${ports.metrics} != ${metrics}`);
  if (ports.health !== portOf(health)) fail(where, `port health ${ports.health} != ${health}`);
  const ann = ds.spec.template.metadata.annotations ?? {};
  if (ann["prometheus.io/port"] !== String(portOf(metrics))) fail(where, "prometheus.io/port");
  for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    if (c[probe]?.grpc?.port !== portOf(health)) fail(where, `${probe} must be grpc on ${portOf(health)}`);
  }
  const mount = (c.volumeMounts ?? []).find((m) => m.mountPath === socketDir);
  const volume = mount && pod.volumes.find((v) => v.name === mount.name);
  if (!volume?.hostPath) return fail(where, `${socketDir} is not a hostPath mount`);
  const sc = c.securityContext ?? {};
  if (!sc.runAsNonRoot || sc.allowPrivilegeEscalation !== false || !sc.readOnlyRootFilesystem) {
    fail(where, "gpubrokerd must run non-root, without privilege escalation, read-only");
  }
  if (!(sc.capabilities?.drop ?? []).includes("ALL")) fail(where, "gpubrokerd must drop ALL capabilities");
  const cm = find("ConfigMap", "gpubroker-config");
  const config = flag(c.args, "config");
  if (!cm || !config) fail(where, "config file from the ConfigMap");
  else fs.writeFileSync(path.join(outDir, "gpubroker.yaml"), cm.data[path.basename(config)] ?? "");

  // Workers: the socket directory, the broker's group, nothing of the host's.
  for (const w of docs.map((d) => d.doc).filter((d) => d.kind === "Pod")) {
    const ww = `Pod/${w.metadata.name}`;
    const spec = w.spec;
    if (spec.hostPID || spec.hostIPC || spec.hostNetwork) fail(ww, "a worker needs no hostPID/hostIPC/hostNetwork");
    const v = spec.volumes.find((x) => x.hostPath?.path === volume.hostPath.path);
    if (!v) { fail(ww, `does not mount ${volume.hostPath.path}`); continue; }
    if (!(spec.securityContext?.supplementalGroups ?? []).includes(sc.runAsGroup)) {
      fail(ww, `not in the broker's group ${sc.runAsGroup} (supplementalGroups)`);
    }
    for (const x of spec.containers) {
      const m = (x.volumeMounts ?? []).find((y) => y.name === v.name);
      const dir = (x.env ?? []).find((e) => e.name === "GPUBROKER_SOCKET_DIR")?.value ?? "/run/gpubroker";
      if (!m || m.mountPath !== dir) fail(ww, `${x.name} does not see the sockets at ${dir}`);
      if (x.securityContext?.privileged) fail(ww, `${x.name} is privileged`);
    }
  }
}
checkGpubroker();

if (errors.length) {
  for (const e of errors) console.error(`manifests: ${e}`);
  process.exit(1);
}
console.log(`manifests: ${docs.length} objects in ${files.length} files: schemas, fields and gpubroker's requirements hold`);
