// What a TypeScript user writes: checked with `tsc --noEmit` against the packed package's
// types (test/package.test.js), so the .d.ts files describe the API and resolve as installed.
import {
  SidecarClient,
  SidecarError,
  RunFailedError,
  Status,
  connect,
  type SessionRun,
  type Approver,
  type RunEvent,
  type StopReason,
} from '@cleveragents/sidecar-client';

export async function tour(address: string): Promise<string> {
  const client: SidecarClient = connect(address, { metadata: { authorization: 'Bearer t' } });
  await client.waitForReady(5000);
  const tools = await client.listTools();
  const names: string[] = tools.map((tool) => tool.name);
  try {
    const result = await client.runToolLoop({ prompt: 'hi', maxIterations: 2 });
    const answer: string = result.content;
    const why: StopReason = result.stopReason; // a union of the protos' names, not a string
    names.push(answer, why, result.toolCallHistory[0]?.errorKind ?? 'none');
  } catch (err) {
    if (err instanceof RunFailedError) names.push(String(err.result?.content));
    else if (err instanceof SidecarError && err.code === Status.NOT_FOUND) names.push('none');
    else throw err;
  }
  const run: SessionRun = client.session({
    prompt: 'What is the capital of France?',
    tools: { capital_of: ({ country }) => ({ capital: String(country) }) },
    approver,
  });
  for await (const event of run) names.push(describe(event));
  client.close();
  return names.join(',');
}

const approver: Approver = async (request) =>
  request.toolName === 'write_file' && String(request.inputs.path).endsWith('.md')
    ? { approved: true, reason: 'docs only' }
    : false;

function describe(event: RunEvent): string {
  switch (event.payload) {
    case 'approvalDecided':
      return `${event.payload}:${event.approvalDecided?.decidedBy}`;
    case 'runCompleted':
      return `${event.payload}:${event.runCompleted?.result.stopReason}`;
    default:
      return event.payload;
  }
}
