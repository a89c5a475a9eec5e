-- CreateIndex
CREATE INDEX "Receipt_sessionId_kind_id_idx" ON "Receipt"("sessionId", "kind", "id");
