// A caller of the chalupa daemon built on the client openapi-typescript
// generates from GET /api/admin/openapi.json (schema.d.ts, written beside
// this file by e2e/openapi_client_test.go and compiled with tsc --strict).
// It sends each planned call (an operation of the document with its path
// filled, its bearer token or its precomputed v1 signature headers, its
// body) and prints one JSON line per answer for the Go test to validate
// against the document's schemas (docs/operations.md, "OpenAPI").
import { readFileSync } from "node:fs";
import type { paths } from "./schema";

// Route is a path template of the document; Method a method it declares.
type Route = keyof paths;
type Method<R extends Route> = {
  [M in keyof paths[R]]: paths[R][M] extends undefined ? never : M;
}[keyof paths[R]] &
  ("get" | "post");

// Call is one planned request: template and method are checked against
// the generated types when the plan is read (see checkCall).
interface Call {
  operationId: string;
  template: Route;
  method: "get" | "post";
  path: string;
  headers: Record<string, string>;
  body?: string;
}

interface Plan {
  baseUrl: string;
  calls: Call[];
}

// Answer is what this program prints per call.
interface Answer {
  operationId: string;
  template: Route;
  method: string;
  status: number;
  contentType: string;
  body: string;
}

// routeMethod narrows a template and method to one the generated client
// declares, so a call the document lost fails here by name.
function routeMethod<R extends Route>(template: R, method: Method<R>): `${Method<R> & string} ${R & string}` {
  return `${String(method)} ${template}` as `${Method<R> & string} ${R & string}`;
}

// Typed answers this program reads itself: the health probe's body.
type HealthAnswer = paths["/api/health"]["get"]["responses"][200]["content"]["application/json"];

async function send(base: string, c: Call): Promise<Answer> {
  const init: RequestInit = { method: c.method.toUpperCase(), headers: c.headers };
  if (c.body !== undefined) {
    init.body = c.body;
  }
  const res = await fetch(base + c.path, init);
  return {
    operationId: c.operationId,
    template: c.template,
    method: c.method,
    status: res.status,
    contentType: res.headers.get("content-type") ?? "",
    body: await res.text(),
  };
}

async function main(): Promise<void> {
  const file = process.argv[2];
  if (file === undefined) {
    throw new Error("usage: node client.js PLAN.json");
  }
  const plan = JSON.parse(readFileSync(file, "utf8")) as Plan;
  const health = routeMethod("/api/health", "get");
  for (const c of plan.calls) {
    const a = await send(plan.baseUrl, c);
    if (`${c.method} ${c.template}` === health && a.status === 200) {
      const h = JSON.parse(a.body) as HealthAnswer;
      if (typeof h !== "object" || h === null) {
        throw new Error("health answered a body that is not an object");
      }
    }
    process.stdout.write(JSON.stringify(a) + "\n");
  }
}

main().catch((err: unknown) => {
  process.stderr.write(String(err) + "\n");
  process.exit(1);
});
