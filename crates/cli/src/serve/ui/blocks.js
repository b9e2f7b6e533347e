// awr's timeline page: how one step is drawn (its label, its last words,
// its content blocks, its input and output shown on demand).

import { fmtDuration, h, json } from './util.js';

export function label(nr) {
  let text = nr.nodeId || '(node)';
  if (nr.item !== null) text += ` [${nr.item}]`;
  if (nr.pass > 1) text += ` #${nr.pass}`;
  if (nr.items !== null) text += ` × ${nr.items}`;
  return text;
}

export function lastText(nr) {
  for (let i = nr.blocks.length - 1; i >= 0; i -= 1) {
    const b = nr.blocks[i];
    if (b.kind === 'text' && b.text) return b.text.length > 80 ? `…${b.text.slice(-80)}` : b.text;
    if (b.kind === 'tool') return `tool ${b.name}`;
  }
  return '';
}

export function tokenTitle(own, total) {
  return `own: ${own.input} in, ${own.output} out; with children: ${total.input} in, ${total.output} out`;
}

/** A block of a node run's detail: streamed text keeps one Text node to append to. */
export function drawBlock(block) {
  switch (block.kind) {
    case 'text': {
      const text = document.createTextNode(block.text);
      return { el: h('div', { class: 'blk text' }, text), text };
    }
    case 'thinking': {
      const text = document.createTextNode(block.text);
      return { el: h('details', { class: 'blk thinking', open: true }, h('summary', { text: 'thinking' }), h('div', {}, text)), text };
    }
    case 'tool':
      return {
        el: h('div', { class: `blk tool ${block.status}` },
          h('div', { class: 'tool-head' },
            h('b', { text: block.name || 'tool' }),
            block.id ? h('code', { class: 'muted', text: block.id }) : null,
            h('span', { class: `badge ${block.status}`, text: block.status }),
            block.durationMs !== null ? h('span', { class: 'muted', text: fmtDuration(block.durationMs) }) : null),
          h('div', { class: 'tool-io' },
            h('small', { text: 'arguments' }), h('pre', { text: json(block.input) }),
            block.error ? h('small', { text: 'error' }) : block.output !== undefined ? h('small', { text: 'result' }) : null,
            block.error ? h('pre', { class: 'error', text: json(block.error) }) : block.output !== undefined ? h('pre', { text: json(block.output) }) : null)),
      };
    case 'attempt':
      return { el: h('div', { class: 'blk attempt-line', text: `attempt ${block.attempt}` }) };
    default:
      return { el: h('div', { class: 'blk note' }, h('small', { text: block.type ?? 'note' }), ' ', block.text ?? '') };
  }
}

/** A value shown only when opened: an input can be large. */
export function lazyJson(name, value) {
  if (value === undefined) return h('span');
  const pre = h('pre');
  const details = h('details', { class: 'json' }, h('summary', { text: name }), pre);
  details.addEventListener('toggle', () => {
    if (details.open && !pre.textContent) pre.textContent = json(value);
  });
  return details;
}
