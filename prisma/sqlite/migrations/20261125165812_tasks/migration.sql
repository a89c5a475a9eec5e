-- CreateTable
CREATE TABLE "Task" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "sourceKey" TEXT,
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,
    "sender" TEXT NOT NULL,
    "senderId" TEXT,
    "text" TEXT NOT NULL,
    "lane" TEXT NOT NULL,
    "priority" TEXT NOT NULL,
    "dueAt" DATETIME,
    "assignee" TEXT,
    "status" TEXT NOT NULL DEFAULT 'open',
    "origin" TEXT NOT NULL,
    "model" TEXT,
    "reason" TEXT,
    "createdBy" TEXT NOT NULL,
    "remindedAt" DATETIME,
    "closedAt" DATETIME,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL
);

-- CreateTable
CREATE TABLE "TriageSetting" (
    "bindingId" TEXT NOT NULL PRIMARY KEY,
    "enabled" BOOLEAN NOT NULL DEFAULT false,
    "model" TEXT,
    "updatedBy" TEXT NOT NULL,
    "updatedAt" DATETIME NOT NULL
);

-- CreateIndex
CREATE UNIQUE INDEX "Task_sourceKey_key" ON "Task"("sourceKey");

-- CreateIndex
CREATE INDEX "Task_status_createdAt_idx" ON "Task"("status", "createdAt");

-- CreateIndex
CREATE INDEX "Task_platform_account_chatId_status_idx" ON "Task"("platform", "account", "chatId", "status");
