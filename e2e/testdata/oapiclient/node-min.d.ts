// The few Node.js declarations client.ts uses, so that compiling it needs
// only typescript and the generated schema.d.ts (no @types/node package).
declare module "node:fs" {
  export function readFileSync(path: string, encoding: "utf8"): string;
}
declare const process: {
  argv: string[];
  stdout: { write(s: string): boolean };
  stderr: { write(s: string): boolean };
  exit(code: number): never;
};
