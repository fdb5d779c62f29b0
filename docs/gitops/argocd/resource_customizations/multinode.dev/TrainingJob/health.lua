-- Argo CD health check for multinode.dev/TrainingJob (docs/gitops.md says where it goes).
-- Healthy: running or succeeded. Degraded: failed. Suspended: suspended (Kueue queueing included).
-- Progressing: everything on the way there, with the operator's own words for what it waits on.
local hs = {}

local function condition(type_)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == type_ then
      return c
    end
  end
  return nil
end

local function words(c, default)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return default
end

if obj.status == nil or obj.status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the multinode operator to pick the job up"
  return hs
end

local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed < generation then
  hs.status = "Progressing"
  hs.message = "The operator has not seen the latest spec yet"
  return hs
end

local phase = obj.status.phase
if phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = words(condition("Succeeded"), "Succeeded")
elseif phase == "Failed" then
  hs.status = "Degraded"
  hs.message = words(condition("Failed"), "Failed")
elseif phase == "Running" then
  local synced = condition("CheckpointsSynced")
  if synced ~= nil and synced.status == "False"
      and (synced.reason == "FinalSyncRequested" or synced.reason == "FinalSyncWaitingForPods") then
    hs.status = "Progressing"
    hs.message = words(synced, "Final checkpoint sync")
  else
    hs.status = "Healthy"
    hs.message = "Running, " .. (obj.status.ready or "?") .. " nodes ready"
  end
elseif phase == "Suspended" then
  hs.status = "Suspended"
  hs.message = words(condition("Suspended"), "Suspended")
elseif phase == "Restarting" then
  hs.status = "Progressing"
  hs.message = words(condition("Running"), "Restarting the gang")
else
  -- Pending, Starting: why the pods are not all running yet (Unschedulable, ImagePullFailing, ...).
  hs.status = "Progressing"
  hs.message = words(condition("Running"), phase)
end
return hs
