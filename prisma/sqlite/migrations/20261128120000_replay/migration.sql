-- CreateTable
CREATE TABLE "Replay" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "status" TEXT NOT NULL,
    "selection" TEXT NOT NULL,
    "alternative" TEXT NOT NULL,
    "turnIds" TEXT NOT NULL,
    "turnCount" INTEGER NOT NULL,
    "reportHash" TEXT,
    "error" TEXT,
    "requestedBy" TEXT,
    "workflowId" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "finishedAt" DATETIME
);

-- CreateIndex
CREATE INDEX "Replay_createdAt_idx" ON "Replay"("createdAt");
