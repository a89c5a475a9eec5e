-- CreateIndex
CREATE INDEX "Receipt_workflowId_id_idx" ON "Receipt"("workflowId", "id");

-- CreateIndex
CREATE INDEX "Receipt_runId_id_idx" ON "Receipt"("runId", "id");

-- CreateIndex
CREATE INDEX "Receipt_actor_id_idx" ON "Receipt"("actor", "id");
