/** The floor's one activity: a chat/completions call to the model server, the reply's text back. */
export function createFloorActivities(baseURL: string) {
  return {
    async chat(text: string): Promise<string> {
      const r = await fetch(`${baseURL}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: text }] }),
      });
      if (!r.ok) throw new Error(`the model server answered ${r.status}`);
      const body = (await r.json()) as { choices?: Array<{ message?: { content?: string } }> };
      return body.choices?.[0]?.message?.content ?? '';
    },
  };
}
