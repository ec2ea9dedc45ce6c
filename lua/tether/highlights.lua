-- The highlight groups of the plugin: each is linked to a group every colour scheme defines
-- (`default`, so a colour scheme or the user's own :highlight wins), and linked again after
-- :colorscheme, which clears them.
local M = {}

M.links = {
  TetherHeading = 'Title', -- `# tether: <title>`
  TetherPrompt = 'Question', -- the `> ` lines of a prompt
  TetherSeparator = 'Comment', -- the prompt line above the prompt area
  TetherTool = 'Function', -- a tool line: `  [completed] Read README.md`
  TetherToolFailed = 'ErrorMsg', -- a tool line of a failed or rejected call
  TetherRunEnd = 'Comment', -- `-- end_turn (2 iterations)`
  TetherReasoning = 'Comment', -- the model's reasoning, folded under `  [reasoning]`
  TetherDiffAdd = 'DiffAdd',
  TetherDiffDelete = 'DiffDelete',
  TetherDiffChange = 'DiffChange',
  TetherDiffHeader = 'DiffText', -- `--- a/path`, `+++ b/path`
  TetherPlanTitle = 'Title',
  TetherPlanPending = 'Normal',
  TetherPlanActive = 'Identifier',
  TetherPlanDone = 'Comment',
}

function M.link()
  for group, target in pairs(M.links) do
    vim.api.nvim_set_hl(0, group, { link = target, default = true })
  end
end

local done = false

--- Link the groups once, and again after each :colorscheme.
function M.setup()
  if done then
    return
  end
  done = true
  M.link()
  vim.api.nvim_create_autocmd('ColorScheme', {
    group = vim.api.nvim_create_augroup('tether_highlights', { clear = true }),
    callback = M.link,
  })
end

return M
