// Hosts two JavaScript tools in a Session with a running sidecar, prints each ToolCallRecord
// as it arrives, then the final result. It starts nothing itself:
//
//   .venv/bin/cleveragents-sidecar serve --listen 127.0.0.1:50051   # in another terminal
//   node client/node/examples/session.js 127.0.0.1:50051
import { SidecarClient, ToolError } from '../src/index.js';

const target = process.argv[2] ?? process.env.SIDECAR_ADDRESS ?? '127.0.0.1:50051';
const client = new SidecarClient(target);

const CAPITALS = { France: 'Paris', Japan: 'Tokyo' };

const tools = {
  // A plain function: the sidecar calls it back with the inputs object.
  capital_of: {
    description: 'The capital city of a country.',
    inputSchema: {
      type: 'object',
      properties: { country: { type: 'string' } },
      required: ['country'],
    },
    handler: ({ country }) => {
      const capital = CAPITALS[country];
      if (!capital) throw new ToolError(`no capital on file for ${country}`);
      return { country, capital };
    },
  },
  // An async function returning a number: recorded as {"result": n}.
  word_count: async ({ text }) => text.split(/\s+/).filter(Boolean).length,
};

// The sidecar's `scripted` profile plays the model from this script: no API key needed.
const llm = {
  script: [
    {
      content: "I'll look up both capitals at once.",
      tool_calls: [
        { id: 'call_1', name: 'capital_of', arguments: { country: 'France' } },
        { id: 'call_2', name: 'capital_of', arguments: { country: 'Atlantis' } },
      ],
      usage: { input_tokens: 410, output_tokens: 31 },
    },
    {
      content: 'Counting the words of my answer.',
      tool_calls: [
        { id: 'call_3', name: 'word_count', arguments: { text: 'The capital of France is Paris.' } },
      ],
      usage: { input_tokens: 520, output_tokens: 22 },
    },
    {
      content: 'The capital of France is Paris (6 words). Atlantis is not on file.',
      usage: { input_tokens: 600, output_tokens: 45 },
    },
  ],
};

try {
  await client.waitForReady(3000);
} catch {
  console.error(`no sidecar answers at ${target}; start one with: cleveragents-sidecar serve`);
  process.exit(1);
}

const run = client.session({ prompt: 'What are the capitals of France and Atlantis?', tools, llm });
for await (const event of run) {
  if (event.payload !== 'toolCallCompleted') continue;
  const r = event.toolCallCompleted.record;
  const outcome = r.success ? `ok      ${JSON.stringify(r.output)}` : `FAILED  ${r.error}`;
  const took = `${r.durationMs.toFixed(1).padStart(6)} ms`;
  console.log(
    `${`#${event.sequence}`.padEnd(4)} ${r.callId}  ${r.toolName.padEnd(10)} ${took}  ${outcome}`,
  );
}
const result = await run.result;
const failed = result.toolCallHistory.filter((r) => !r.success).length;
console.log(`\nfinal answer: ${result.content}`);
console.log(
  `${result.stopReason}, ${result.iterations} iterations, ${result.toolCallHistory.length} tool calls ` +
    `(${failed} failed), tokens in/out ${result.usage.inputTokens}/${result.usage.outputTokens}`,
);
client.close();
