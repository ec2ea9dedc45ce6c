" The chat buffer of a tether session: Markdown (included, so the filetype stays tether-chat and
" plugins made for markdown buffers do not attach), and the lines tether draws itself.
if exists('b:current_syntax')
  finish
endif

runtime! syntax/markdown.vim
unlet! b:current_syntax

syntax match TetherHeading /\%1l^# tether.*$/
syntax match TetherPrompt /^> .*$/
syntax match TetherTool /^  \[\(pending\|in_progress\|completed\|called\|cancelled\)\] .*$/
syntax match TetherToolFailed /^  \[failed\] .*$/
syntax match TetherReasoning /^  \[reasoning\].*$/
syntax match TetherRunEnd /^-- \w\+.*$/
syntax match TetherSeparator /^──── prompt ────.*$/

let b:current_syntax = 'tether-chat'
