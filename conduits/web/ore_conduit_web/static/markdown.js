// A small Markdown renderer for answers: safe by construction (every piece of text is
// escaped; links only to http(s), mailto and relative URLs), with code highlighting.
// Streaming: `updateStreaming` splits the text into blocks and keeps the elements of
// settled blocks; only the last, still-growing block is rendered again.
"use strict";

const OreMarkdown = (() => {
  const escapeHtml = (text) =>
    text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
        .replace(/"/g, "&quot;").replace(/'/g, "&#39;");

  const safeUrl = (url) => {
    const trimmed = url.trim();
    if (/^(https?:|mailto:)/i.test(trimmed) || /^[/#.]/.test(trimmed)) return trimmed;
    return null;
  };

  // Inline: code spans first (their content is literal), then links, bold, italics.
  function inline(text) {
    const parts = text.split(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/);
    let out = "";
    for (let i = 0; i < parts.length; i++) {
      if (i % 3 === 0) out += inlineText(parts[i]);
      else if (i % 3 === 2) out += `<code>${escapeHtml(parts[i].trim() || parts[i])}</code>`;
    }
    return out;
  }

  function inlineText(text) {
    let html = escapeHtml(text);
    html = html.replace(/\[([^\]]+)\]\(([^)\s]+)\)/g, (whole, label, href) => {
      const url = safeUrl(href.replace(/&amp;/g, "&"));
      return url ? `<a href="${escapeHtml(url)}" rel="noopener noreferrer" target="_blank">${label}</a>` : whole;
    });
    html = html.replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>");
    html = html.replace(/__([^_]+)__/g, "<strong>$1</strong>");
    html = html.replace(/(^|[^*])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>");
    html = html.replace(/~~([^~]+)~~/g, "<del>$1</del>");
    return html;
  }

  const KEYWORDS = new Set((
    "def class return if elif else for while in not and or is import from as with try except " +
    "finally raise yield lambda pass break continue async await None True False function const " +
    "let var new this typeof instanceof switch case default throw catch null undefined true false " +
    "fn pub struct enum impl match mut use mod trait where type interface package func go defer " +
    "select chan map range public private static void int string bool echo export"
  ).split(" "));

  // A tokenizer good enough for most languages: comments, strings, numbers, keywords.
  function highlight(code) {
    const pattern = /(\/\/[^\n]*|#[^\n]*|\/\*[\s\S]*?\*\/)|("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`(?:[^`\\]|\\.)*`)|(\b\d+(?:\.\d+)?\b)|([A-Za-z_][A-Za-z0-9_]*)/g;
    let out = "";
    let last = 0;
    for (const match of code.matchAll(pattern)) {
      out += escapeHtml(code.slice(last, match.index));
      const [token, comment, string, number, word] = match;
      if (comment) out += `<span class="tok-com">${escapeHtml(token)}</span>`;
      else if (string) out += `<span class="tok-str">${escapeHtml(token)}</span>`;
      else if (number) out += `<span class="tok-num">${token}</span>`;
      else if (word && KEYWORDS.has(word)) out += `<span class="tok-kw">${word}</span>`;
      else out += escapeHtml(token);
      last = match.index + token.length;
    }
    return out + escapeHtml(code.slice(last));
  }

  function codeBlock(lang, code) {
    const label = lang ? ` data-lang="${escapeHtml(lang)}"` : "";
    return `<pre class="code"${label}><button type="button" class="copy" aria-label="Copy code">Copy</button>` +
      `<code>${highlight(code)}</code></pre>`;
  }

  // Blocks: fenced code, or runs of lines up to a blank line. An unclosed fence is
  // the last block (still streaming) and runs to the end.
  function splitBlocks(text) {
    const lines = text.split("\n");
    const blocks = [];
    let current = [];
    let fence = null;
    const flush = () => { if (current.length) blocks.push(current.join("\n")); current = []; };
    for (const line of lines) {
      const opener = line.match(/^\s*(```+|~~~+)/);
      if (fence) {
        current.push(line);
        if (opener && opener[1][0] === fence[0] && opener[1].length >= fence.length && !line.trim().slice(opener[1].length)) {
          flush();
          fence = null;
        }
      } else if (opener) {
        flush();
        fence = opener[1];
        current.push(line);
      } else if (!line.trim()) {
        flush();
      } else {
        current.push(line);
      }
    }
    flush();
    return blocks;
  }

  function renderBlock(block) {
    const fence = block.match(/^[ \t]*(```+|~~~+)[ \t]*([\w+#.-]*)[^\n]*\n?([\s\S]*)$/);
    if (fence) {
      let body = fence[3];
      const closing = body.match(new RegExp(`\\n?\\s*${fence[1][0] === "`" ? "`" : "~"}{${fence[1].length},}\\s*$`));
      if (closing) body = body.slice(0, closing.index);
      return codeBlock(fence[2], body);
    }
    const lines = block.split("\n");
    const heading = lines[0].match(/^(#{1,6})\s+(.*)$/);
    if (heading && lines.length === 1) {
      const level = heading[1].length;
      return `<h${level}>${inline(heading[2])}</h${level}>`;
    }
    if (lines.every((l) => /^\s*>/.test(l))) {
      return `<blockquote>${render(lines.map((l) => l.replace(/^\s*> ?/, "")).join("\n"))}</blockquote>`;
    }
    if (lines.every((l) => /^\s*([-*+]|\d+[.)])\s+/.test(l) || /^\s{2,}\S/.test(l))) {
      const ordered = /^\s*\d+[.)]/.test(lines[0]);
      const items = [];
      for (const line of lines) {
        const item = line.match(/^\s*(?:[-*+]|\d+[.)])\s+(.*)$/);
        if (item) items.push(item[1]);
        else items[items.length - 1] += " " + line.trim();
      }
      const tag = ordered ? "ol" : "ul";
      return `<${tag}>${items.map((i) => `<li>${inline(i)}</li>`).join("")}</${tag}>`;
    }
    if (lines.length === 1 && /^\s*([-*_])\s*\1\s*\1[\s\1]*$/.test(lines[0])) return "<hr>";
    return `<p>${lines.map(inline).join("<br>")}</p>`;
  }

  function render(text) {
    return splitBlocks(text).map(renderBlock).join("");
  }

  // While an answer streams, blocks before the last are settled: their elements are
  // kept, and only the growing last block (and any new ones) is rendered again.
  function updateStreaming(element, text) {
    const blocks = splitBlocks(text);
    const kept = element.oreBlocks || [];
    let same = 0;
    while (same < kept.length && same < blocks.length - 1 && kept[same] === blocks[same]) same++;
    while (element.children.length > same) element.lastElementChild.remove();
    for (let i = same; i < blocks.length; i++) element.insertAdjacentHTML("beforeend", renderBlock(blocks[i]));
    element.oreBlocks = blocks;
  }

  return { render, updateStreaming, escapeHtml, highlight };
})();
