-- :checkhealth tether — does the configured server start and answer initialize? When it does not,
-- say why: its exit status and what it wrote on stderr (`No module named tether`, a config error).
local M = {}

local health = vim.health or require('health')
local start = health.start or health.report_start
local ok = health.ok or health.report_ok
local info = health.info or health.report_info
local report_error = health.error or health.report_error

local TIMEOUT_MS = 10000

function M.check()
  local config = require('tether.config')
  local rpc = require('tether.rpc')
  start('tether')
  local cmd = config.server_cmd()
  info('server command: ' .. table.concat(cmd, ' '))
  info('approval: ' .. config.options.approval)
  if vim.fn.executable(cmd[1]) ~= 1 then
    report_error(cmd[1] .. ' is not executable', { 'Set cmd in require("tether").setup{ cmd = {...} }' })
    return
  end
  local answer
  local client = rpc.start({
    cmd = cmd,
    cwd = config.options.cwd,
    init_options = config.init_options(),
  }, function(err, result)
    answer = { err = err, result = result }
  end)
  vim.wait(TIMEOUT_MS, function()
    return answer ~= nil
  end, 20)
  if not answer then
    local advice = {}
    local tail = client:stderr_tail(10)
    if tail ~= '' then
      table.insert(advice, 'stderr: ' .. tail)
    end
    report_error(string.format('the server did not answer initialize within %d s', TIMEOUT_MS / 1000), advice)
  elseif answer.err then
    report_error('the server does not start: ' .. tostring(answer.err.message), {
      'Check that `' .. table.concat(cmd, ' ') .. '` runs in a terminal (is tether installed for that python?)',
      'Set cmd in require("tether").setup{ cmd = {...} }, e.g. { "/path/to/tether/.venv/bin/tether", "serve" }',
    })
  else
    local server = answer.result.serverInfo or {}
    ok(string.format('server starts: %s %s, protocol %s', server.name or '?', server.version or '?',
      tostring(answer.result.protocolVersion)))
    local caps = answer.result.capabilities or {}
    if caps.providers then
      info('providers: ' .. table.concat(caps.providers, ', '))
    end
  end
  client:stop()
end

return M
